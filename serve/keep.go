package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/gpu-mode/kbgen/payload"
)

// Default bounds of kept results (Config.ResultMemory, ResultInMemoryMax,
// ResultDisk).
const (
	DefaultResultMemory      = 64 << 20
	DefaultResultInMemoryMax = 1 << 20
	DefaultResultDisk        = 2 << 30
)

// keeper holds the results of done runs within bounds: a result is kept
// as its JSON, in memory when it is at most inMemoryMax and the memory
// budget allows, else spilled to a file in the spill directory (0600);
// when the files pass their budget the oldest is dropped, and its run
// says so (RunStatus.ResultGone). A result.json is the submission's to
// size (up to client.MaxResultBytes, 64 MiB), so nothing here grows with
// it: issue 20 saw 1.97 GB after four 53 MB results.
type keeper struct {
	mu                  sync.Mutex
	parent              string // where the spill directory is made; "" = os.TempDir()
	dir                 string // made at the first spill
	memMax, inMemoryMax int64
	diskMax             int64
	mem, disk           int64
	order               []*kept // in memory or on disk, oldest first
}

// kept is one run's result as the keeper holds it.
type kept struct {
	data []byte // in memory, or nil
	path string // on disk, or ""
	size int64
	gone string // why it is no longer available; "" while it is
}

func newKeeper(cfg Config) *keeper {
	k := &keeper{parent: cfg.SpillDir, memMax: cfg.ResultMemory, inMemoryMax: cfg.ResultInMemoryMax, diskMax: cfg.ResultDisk}
	if k.memMax <= 0 {
		k.memMax = DefaultResultMemory
	}
	if k.inMemoryMax <= 0 {
		k.inMemoryMax = DefaultResultInMemoryMax
	}
	if k.diskMax <= 0 {
		k.diskMax = DefaultResultDisk
	}
	return k
}

// keep stores res and returns its handle.
func (k *keeper) keep(res *payload.FullResult) *kept {
	b, err := json.Marshal(res)
	if err != nil {
		return &kept{gone: fmt.Sprintf("the result could not be encoded: %v", err)}
	}
	e := &kept{data: b, size: int64(len(b))}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.order = append(k.order, e)
	k.mem += e.size
	if e.size > k.inMemoryMax {
		k.spillLocked(e)
	}
	for i := 0; k.mem > k.memMax && i < len(k.order); i++ {
		if k.order[i].data != nil {
			k.spillLocked(k.order[i])
		}
	}
	for k.disk > k.diskMax {
		oldest := slices.IndexFunc(k.order, func(x *kept) bool { return x.path != "" })
		k.dropLocked(k.order[oldest], fmt.Sprintf("the result was dropped: kbgen serve keeps %d MiB of results on disk and newer ones filled it; `kbgen result BUILD` reads it from Buildkite", k.diskMax>>20))
	}
	return e
}

// spillLocked moves e from memory to a file (or drops it when the file
// cannot be written).
func (k *keeper) spillLocked(e *kept) {
	data := e.data
	e.data = nil
	k.mem -= e.size
	if k.dir == "" {
		dir, err := os.MkdirTemp(k.parent, "kbgen-serve-results-")
		if err != nil {
			k.dropLocked(e, fmt.Sprintf("the result was dropped: it could not be kept on disk (%v); `kbgen result BUILD` reads it from Buildkite", err))
			return
		}
		k.dir = dir
	}
	f, err := os.CreateTemp(k.dir, "result-*.json")
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}
	if err != nil {
		k.dropLocked(e, fmt.Sprintf("the result was dropped: it could not be kept on disk (%v); `kbgen result BUILD` reads it from Buildkite", err))
		return
	}
	e.path = f.Name()
	k.disk += e.size
}

// dropLocked forgets e, saying why.
func (k *keeper) dropLocked(e *kept, why string) {
	if e.data != nil {
		k.mem -= e.size
		e.data = nil
	}
	if e.path != "" {
		_ = os.Remove(e.path)
		k.disk -= e.size
		e.path = ""
	}
	e.gone = why
	k.order = slices.DeleteFunc(k.order, func(x *kept) bool { return x == e })
}

// release forgets e (its run was pruned).
func (k *keeper) release(e *kept) {
	if e == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.gone == "" {
		k.dropLocked(e, "the run was pruned")
	}
}

// open returns e's JSON as a reader and its size, or why it is gone.
// A file dropped after open still reads (the open descriptor keeps it).
func (k *keeper) open(e *kept) (io.ReadCloser, int64, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case e.gone != "":
		return nil, 0, e.gone
	case e.data != nil:
		return io.NopCloser(bytes.NewReader(e.data)), e.size, ""
	}
	f, err := os.Open(e.path)
	if err != nil {
		return nil, 0, fmt.Sprintf("the result could not be read back from disk: %v", err)
	}
	return f, e.size, ""
}

// usage reports the bytes kept in memory and on disk.
func (k *keeper) usage() (mem, disk int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mem, k.disk
}

// close removes the spill directory.
func (k *keeper) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dir != "" {
		_ = os.RemoveAll(k.dir)
	}
}
