package nvmlserve

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"
)

// An Xid NVML reports on a GPU is that GPU's next sample's, once.
func TestXidWatch(t *testing.T) {
	t.Parallel()
	s := node(t, 2, pairs, gpus.H100_SXM5_80GB)
	events := make(chan nvml.EventData, 2)
	setEvents(s, events)
	w := watchXids(s)
	defer w.close(time.Second)
	gpu1 := s.Devices[1].(*server.Device)
	events <- nvml.EventData{Device: gpu1, EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	events <- nvml.EventData{Device: gpu1, EventType: nvml.EventTypeXidCriticalError, EventData: 13}
	var got []int
	for deadline := time.Now().Add(10 * time.Second); len(got) < 2 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		xids, why := w.drain(gpu1.UUID)
		if why != "" {
			t.Fatalf("not watching: %s", why)
		}
		got = append(got, xids...)
	}
	if d := cmp.Diff([]int{79, 13}, got); d != "" {
		t.Errorf("GPU 1's Xids (-want +got):\n%s", d)
	}
	if xids, _ := w.drain(gpu1.UUID); xids != nil {
		t.Errorf("drained twice: %v", xids)
	}
	if xids, _ := w.drain(s.Devices[0].(*server.Device).UUID); xids != nil {
		t.Errorf("GPU 0 got GPU 1's Xids: %v", xids)
	}
}

// A driver or container that will not deliver Xid events leaves every
// sample saying so, and the samples themselves unharmed.
func TestXidUnwatched(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*server.Server)
		why  string
	}{
		{"no event set", func(s *server.Server) {
			s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		}, "creating an NVML event set: ERROR_NOT_SUPPORTED"},
		{"registration refused", func(s *server.Server) {
			for _, d := range s.Devices {
				d.(*server.Device).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NO_PERMISSION }
			}
		}, "registering for Xid events: ERROR_NO_PERMISSION"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := node(t, 1, pcie, l4)
			tc.edit(s)
			replies, err := converse(t, s, `{"op":"sample"}`)
			if err != nil {
				t.Fatal(err)
			}
			got := replies[1].Samples[0]
			if got.XidsUnwatched != tc.why || got.SMClockMHz == nil {
				t.Errorf("sample = %+v, want its readings and xids_unwatched %q", got, tc.why)
			}
		})
	}
}

// The helper's exit does not wait out an event wait in progress: close
// reports that NVML is still busy, and the process's end takes it.
func TestXidCloseDoesNotWait(t *testing.T) {
	t.Parallel()
	s := node(t, 1, pcie, l4)
	release, waiting := make(chan struct{}), make(chan struct{}, 1)
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				waiting <- struct{}{}
				<-release
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	w := watchXids(s)
	<-waiting
	if w.close(20 * time.Millisecond) {
		t.Error("close reported the watcher done while its wait was blocked")
	}
	close(release)
	<-w.done
	if w := watchXids(node(t, 1, pcie, l4)); !w.close(time.Second) {
		t.Error("close of an idle watcher reported it busy")
	}
}
