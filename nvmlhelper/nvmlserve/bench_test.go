package nvmlserve

import (
	"os/exec"
	"sync"
	"testing"
)

// BenchmarkSample is the noise record's per-sample GPU cost by each path,
// side by side on one machine. "kbgen-nvml" is a request to a running
// helper process and its reply (this test binary serving go-nvml's mock;
// on a GPU, add the NVML calls themselves). "two-process-starts" is the
// floor of the nvidia-smi path, which starts two nvidia-smi processes at
// once per sample (--query-gpu and --query-compute-apps): here /bin/true,
// without nvidia-smi's own driver initialisation (72-190 ms on an H100).
//
//	go test -run '^$' -bench Sample -benchtime 2000x ./nvmlhelper/nvmlserve
func BenchmarkSample(b *testing.B) {
	b.Run("kbgen-nvml", func(b *testing.B) {
		h, err := startHelper(b, "serve", 0)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, err := h.Sample("0"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("two-process-starts", func(b *testing.B) {
		for b.Loop() {
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					if err := exec.Command("/bin/true").Run(); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
		}
	})
}
