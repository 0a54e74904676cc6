package nvmlserve

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// xidWaitMS is how long one wait for an event blocks: the watcher checks
// for its stop this often.
const xidWaitMS = 200

// xidCloseWait is how long the helper's exit waits for the watcher: not
// a whole xidWaitMS, which would lengthen every job's end.
const xidCloseWait = 20 * time.Millisecond

// xidWatch collects the Xid critical errors NVML reports while the helper
// lives. NVML delivers an Xid only to an event set registered when it
// happens; the helper lives for the whole job, so each sample can say
// which Xids its GPU raised since the one before (during a timed run,
// between its before and after samples).
type xidWatch struct {
	mu   sync.Mutex
	seen map[string][]int // by GPU UUID, since last drained
	// why is why Xids are not watched ("" while they are).
	why  string
	set  nvml.EventSet
	stop chan struct{}
	done chan struct{}
}

// watchXids registers every GPU for Xid events and starts the watcher;
// a driver or container that refuses leaves a watch that says why.
func watchXids(lib nvml.Interface) *xidWatch {
	w := &xidWatch{seen: map[string][]int{}}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		w.why = fmt.Sprintf("creating an NVML event set: %v", ret)
		return w
	}
	n, _ := lib.DeviceGetCount()
	registered, refused := 0, nvml.Return(nvml.ERROR_NOT_FOUND)
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			refused = ret
			continue
		}
		registered++
	}
	if registered == 0 {
		_ = set.Free()
		w.why = fmt.Sprintf("registering for Xid events: %v", refused)
		return w
	}
	w.set, w.stop, w.done = set, make(chan struct{}), make(chan struct{})
	go w.run()
	return w
}

// run waits for events until stopped, or until NVML fails the wait.
func (w *xidWatch) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		data, ret := w.set.Wait(xidWaitMS)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
		case ret != nvml.SUCCESS:
			w.mu.Lock()
			w.why = fmt.Sprintf("waiting for Xid events: %v", ret)
			w.mu.Unlock()
			return
		case data.EventType&nvml.EventTypeXidCriticalError != 0 && data.Device != nil:
			uuid, _ := data.Device.GetUUID()
			w.mu.Lock()
			w.seen[uuid] = append(w.seen[uuid], int(data.EventData))
			w.mu.Unlock()
		}
	}
}

// drain is the Xids seen on the GPU uuid since the last drain, or why
// none are watched. A nil watch (the inventory command) watches nothing.
func (w *xidWatch) drain(uuid string) ([]int, string) {
	if w == nil {
		return nil, "not watched"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	xids := w.seen[uuid]
	delete(w.seen, uuid)
	return xids, w.why
}

// close stops the watcher and frees the event set, waiting at most wait
// for the watcher's current event wait to end. It reports whether NVML is
// free to shut down: false leaves the set to the process's exit.
func (w *xidWatch) close(wait time.Duration) bool {
	if w.set == nil {
		return true
	}
	close(w.stop)
	select {
	case <-w.done:
		_ = w.set.Free()
		return true
	case <-time.After(wait):
		return false
	}
}
