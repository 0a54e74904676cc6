package e2e

import (
	"reflect"
	"testing"
)

// TestServeExample: the example job through kbgen serve and real agents
// gives kbgen local's FullResult, and the result came from the build's
// meta-data (the runner set it with buildkite-agent meta-data set): no
// artifact request at all.
func TestServeExample(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	sock, log := h.startServe(t, "200ms")
	got := h.run(append(h.cliEnv(), "KBGEN_SERVER=unix:"+sock), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--mode", "test", "--run-id", "e2e-serve", "--timeout", "3m")
	if got.code != 0 {
		t.Fatalf("submit --server: exit %d\n%s\n%s\nserve:\n%s", got.code, got.stdout, got.stderr, log.String())
	}
	want := h.run(nil, "local", "--example", "vectoradd", "--mode", "test", "--json")
	if g, w := comparable(t, got.stdout), comparable(t, want.stdout); !reflect.DeepEqual(g, w) {
		t.Errorf("the FullResult through kbgen serve differs from kbgen local's:\nserve: %v\nlocal: %v", g, w)
	}
	if h.srv.CountRequests("GET", "/builds?") == 0 {
		t.Fatal("no builds-list request recorded: the artifact count below proves nothing")
	}
	if n := h.srv.CountRequests("", "/artifacts"); n != 0 {
		t.Errorf("kbgen serve made %d artifact requests: the result did not ride on the build's meta-data", n)
	}
	t.Logf("kbgen serve:\n%s", log.String())
}
