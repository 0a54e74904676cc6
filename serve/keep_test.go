package serve

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// bigResult is a passing FullResult whose stdout makes it about size
// bytes of JSON (what a submission printing or profiling a lot makes).
func bigResult(size int) *payload.FullResult {
	return &payload.FullResult{Success: true, Runs: map[string]payload.EvalResult{"test": {Run: &payload.RunResult{Success: true, Passed: true, Stdout: strings.Repeat("x", size), Result: map[string]string{"check": "pass"}}}}}
}

func readKept(t *testing.T, k *keeper, e *kept) (string, string) {
	t.Helper()
	rc, _, gone := k.open(e)
	if gone != "" {
		return "", gone
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), ""
}

// TestKeeperBounds: small results stay in memory until the memory budget,
// then the oldest go to disk; a large one goes to disk at once; past the
// disk budget the oldest is dropped and says why; every kept result reads
// back whole.
func TestKeeperBounds(t *testing.T) {
	t.Parallel()
	k := newKeeper(Config{SpillDir: t.TempDir(), ResultMemory: 3000, ResultInMemoryMax: 2000, ResultDisk: 25000})
	defer k.close()
	small := []*kept{k.keep(bigResult(900)), k.keep(bigResult(900)), k.keep(bigResult(900))}
	if mem, disk := k.usage(); mem > 3000 || disk == 0 || small[0].path == "" || small[2].data == nil {
		t.Errorf("after three ~1 KB results: mem %d disk %d; first on disk %q, last in memory %v", mem, disk, small[0].path, small[2].data != nil)
	}
	large := k.keep(bigResult(10000))
	if large.data != nil || large.path == "" {
		t.Error("a result over ResultInMemoryMax stayed in memory")
	}
	for i, e := range append(small, large) {
		got, gone := readKept(t, k, e)
		var res payload.FullResult
		if gone != "" || json.Unmarshal([]byte(got), &res) != nil || !res.Success {
			t.Errorf("result %d did not read back: gone %q", i, gone)
		}
	}
	// Two more large results pass the 25000-byte disk budget: the
	// oldest on disk go.
	k.keep(bigResult(10000))
	k.keep(bigResult(10000))
	if _, gone := readKept(t, k, small[0]); !strings.Contains(gone, "dropped") || !strings.Contains(gone, "kbgen result BUILD") {
		t.Errorf("the oldest result: gone = %q", gone)
	}
	if _, disk := k.usage(); disk > 25000 {
		t.Errorf("disk use %d over the budget", disk)
	}
	k.release(large)
	if _, err := os.Stat(large.path); large.path != "" || err == nil {
		t.Error("a released result's file is still there")
	}
}

var resultMB = flag.Int("result-mb", 8, "TestKeptResultsMemory: the size of each result.json in MiB (issue 20 saw 53)")

// TestKeptResultsMemory runs four builds whose result.json is -result-mb
// MiB each (issue 20: kbgen serve reached 1.97 GB after four of 53 MB)
// through the real service: download, parse, keep, and GET each back
// whole. What stays on the heap afterwards is bounded by ResultMemory;
// with every result in memory (as before) it grows by the results' size.
// Both are logged; docs/performance.md records them.
func TestKeptResultsMemory(t *testing.T) {
	n, size := 4, *resultMB<<20
	if raceEnabled && *resultMB == 8 {
		size = 2 << 20 // still over ResultInMemoryMax
	}
	raw, err := json.Marshal(bigResult(size))
	if err != nil {
		t.Fatal(err)
	}
	sc := fastScript
	sc.Artifacts = map[string][]byte{contract.ResultFile: raw}
	measure := func(keep Config) uint64 {
		r := newRig(t, rigOpts{script: sc, keep: keep})
		before := heap()
		for i := range n {
			r.submit(fmt.Sprintf("big-%d", i))
		}
		for i := range n {
			st := r.await(fmt.Sprintf("big-%d", i), 3*time.Minute)
			if st.Result == nil || len(st.Result.Runs["test"].Run.Stdout) != size {
				t.Fatalf("run %d: status %s, result gone %q", i, st.Status, st.ResultGone)
			}
		}
		grew := heap() - min(before, heap())
		r.cancel()
		return grew
	}
	bounded := measure(Config{SpillDir: t.TempDir()})
	unbounded := measure(Config{SpillDir: t.TempDir(), ResultMemory: 1 << 40, ResultInMemoryMax: 1 << 40})
	t.Logf("heap kept after %d results of %d MiB: %d MiB bounded (default budgets), %d MiB with every result in memory", n, size>>20, bounded>>20, unbounded>>20)
	// Each result is over ResultInMemoryMax, so none may stay on the heap:
	// the growth must be less than one of them.
	if bounded >= uint64(size) {
		t.Errorf("kept %d MiB of heap: a result of %d MiB stayed in memory", bounded>>20, size>>20)
	}
}

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestDroppedResultSaysSo: a result dropped from the disk budget is
// answered with result_gone, and kbgen submit --server's client turns it
// into an infra outcome naming the reason.
func TestDroppedResultSaysSo(t *testing.T) {
	sc := fastScript
	raw, _ := json.Marshal(bigResult(3 << 20))
	sc.Artifacts = map[string][]byte{contract.ResultFile: raw}
	r := newRig(t, rigOpts{script: sc, keep: Config{SpillDir: t.TempDir(), ResultDisk: 5 << 20}})
	r.submit("first")
	r.await("first", time.Minute)
	r.submit("second")
	r.await("second", time.Minute)
	st := r.await("first", time.Minute)
	if st.Result != nil || !strings.Contains(st.ResultGone, "dropped") {
		t.Fatalf("first run after the second: result %v, gone %q", st.Result != nil, st.ResultGone)
	}
	rem, _ := NewRemote(r.http.URL, testToken)
	got, err := rem.Run(t.Context(), RunRequest{RunID: "first", Queue: "nvidia-h100", Payload: testPayload(t)}, func(client.Event) {})
	if err != nil || got.Status != StatusInfra || got.Result == nil || !strings.Contains(got.Result.Error, "dropped") {
		t.Fatalf("remote: %v %+v", err, got)
	}
}
