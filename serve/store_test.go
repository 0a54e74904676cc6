package serve

import (
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/payload"
)

func TestStorePrune(t *testing.T) {
	st := newStore()
	t0 := time.Unix(1e9, 0)
	old, _ := st.add(RunRequest{RunID: "old"}, t0)
	recent, _ := st.add(RunRequest{RunID: "recent"}, t0)
	open, _ := st.add(RunRequest{RunID: "open"}, t0)
	for i, r := range []*Run{old, recent, open} {
		r.setBuild(&client.Build{Number: i + 1, State: "running"}, t0)
		st.linkBuild(r, i+1)
	}
	old.finish(client.Obtained, &payload.FullResult{Success: true}, newKeeper(Config{}), t0)
	recent.finish(client.Obtained, &payload.FullResult{Success: true}, newKeeper(Config{}), t0.Add(2*time.Hour))
	if n := st.prune(t0.Add(time.Hour), nil); n != 1 {
		t.Fatalf("pruned %d runs, want 1", n)
	}
	if st.get("old") != nil || st.byNumber(1) != nil {
		t.Error("the old run is still there")
	}
	if st.get("recent") == nil || st.get("open") == nil || st.byNumber(3) == nil {
		t.Error("a recent or open run was pruned")
	}
	if again, fresh := st.add(RunRequest{RunID: "recent"}, t0); fresh || again != recent {
		t.Error("adding a known id made a new run")
	}
}
