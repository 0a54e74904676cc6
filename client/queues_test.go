package client

import (
	"context"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

func TestQueues(t *testing.T) {
	t.Parallel()
	r := newRig(t, fakebuildkite.QuickScript)
	r.fake.SetAgents([]fakebuildkite.AgentSpec{
		{Name: "node1-gpu1", Version: "3.50.0", Queue: "h100", BusyWith: ":nvidia: eval h100 · test"},
		{Name: "node1-gpu0", Version: "3.50.0", Queue: "h100"},
		{Name: "node2-gpu0", Version: "3.49.0", Queue: "h100", Paused: true},
		{Name: "mi-0", Version: "3.50.0", Queue: "mi300"},
	})
	never := fakebuildkite.QuickScript
	never.Never = true
	stuck := fakebuildkite.QuickScript
	stuck.EvalNeverStarts, stuck.Never = true, true
	r.fake.Seed("a", "h100", never, 10*time.Second)                  // eval running on an agent: not waiting
	r.fake.Seed("b", "h100", stuck, 10*time.Second)                  // eval scheduled: waiting
	r.fake.Seed("c", "h100", fakebuildkite.QuickScript, 0)           // just created, scheduled: waiting
	r.fake.Seed("d", "b200", stuck, 10*time.Second)                  // a queue with no agents
	r.fake.Seed("e", "h100", fakebuildkite.QuickScript, time.Minute) // passed: not waiting

	got, err := r.client.Queues(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"queue":"b200","total":0,"idle":0,"busy":0,"waiting":1,"agents":[]},` +
		`{"queue":"h100","total":3,"idle":1,"busy":1,"waiting":2,"agents":[{"name":"node1-gpu0","version":"3.50.0","busy":false},{"name":"node1-gpu1","version":"3.50.0","busy":true,"job":":nvidia: eval h100 · test"},{"name":"node2-gpu0","version":"3.49.0","busy":false,"paused":true}]},` +
		`{"queue":"mi300","total":1,"idle":1,"busy":0,"waiting":0,"agents":[{"name":"mi-0","version":"3.50.0","busy":false}]}]`
	if s := mustJSON(t, got); s != want {
		t.Errorf("queues:\n got %s\nwant %s", s, want)
	}

	one, err := r.client.Queues(context.Background(), "a100")
	if err != nil {
		t.Fatal(err)
	}
	if s := mustJSON(t, one); s != `[{"queue":"a100","total":0,"idle":0,"busy":0,"waiting":0,"agents":[]}]` {
		t.Errorf("unknown queue: %s", s)
	}
}
