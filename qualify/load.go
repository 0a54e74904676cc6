package qualify

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// loadWords is each load thread's buffer: 32 MiB, past any per-core cache,
// so the load takes memory bandwidth and shared cache as well as CPU.
const loadWords = 4 << 20

// Load keeps every CPU of cpus busy streaming through memory until ctx
// ends or d passes: one pinned thread per CPU, copying one half of its
// buffer onto the other. nil cpus means this process's CPUs.
func Load(ctx context.Context, cpus []int, d time.Duration) error {
	if len(cpus) == 0 {
		cpus = selfCPUs()
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(cpus))
	for _, c := range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := pinThread([]int{c}); err != nil {
				errs <- err
				return
			}
			buf := make([]uint64, loadWords)
			half := len(buf) / 2
			for ctx.Err() == nil {
				copy(buf[:half], buf[half:])
				for i := 0; i < half; i += 8 {
					buf[half+i]++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
