package serve

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/dashboard"
	"github.com/gpu-mode/kbgen/fleet/dashboard/dashboardtest"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

const amdToken = "amd-vendor-token-0123456789"

// TestDashboard: after a run, the dashboard shows the queue with its
// agents and wait, the agent under its node with its rates, and the
// budget, to the view token; a vendor's token sees only its queue and no
// budget; a headless Chromium renders the served page with no script.
func TestDashboard(t *testing.T) {
	sc := fastScript
	sc.Facts = &runfacts.Facts{Agent: "gpu-node-3-gpu0", Queue: "nvidia-h100", Node: "gpu-node-3", GPUModel: "NVIDIA H100 80GB HBM3", Noise: "noisy"}
	r := newRig(t, rigOpts{script: sc, view: testViewToken, vendors: []dashboard.Scope{{Name: "amd", Token: amdToken, Queues: []string{"amd-mi300"}}}})
	r.fake.SetAgents([]fakebuildkite.AgentSpec{{Name: "gpu-node-3-gpu0", Queue: "nvidia-h100"}, {Name: "mi300-0", Queue: "amd-mi300"}})
	r.submit("d1")
	r.await("d1", 10*time.Second)
	page := func(token string) string {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			resp, body := r.do("GET", "/dashboard", nil, token)
			if resp.StatusCode != 200 {
				t.Fatalf("dashboard: %d %s", resp.StatusCode, body)
			}
			if strings.Contains(string(body), "mi300-0") || time.Now().After(deadline) {
				return string(body)
			}
		}
	}
	all := page(testViewToken)
	for _, want := range []string{`data-queue="nvidia-h100"`, `data-queue="amd-mi300"`, `data-agent="gpu-node-3-gpu0"`, `<h3>gpu-node-3</h3>`, `NVIDIA H100 80GB HBM3`, `100 %`, `id="budget"`} {
		if !strings.Contains(all, want) {
			t.Errorf("the view token's page lacks %q", want)
		}
	}
	amd := page(amdToken)
	if strings.Contains(amd, "nvidia-h100") || strings.Contains(amd, "gpu-node-3-gpu0") || strings.Contains(amd, `id="budget"`) || !strings.Contains(amd, `data-agent="mi300-0"`) {
		t.Errorf("the vendor's page shows another vendor's fleet or lacks its own:\n%s", amd)
	}
	if resp, _ := r.do("GET", "/metrics", nil, amdToken); resp.StatusCode != 401 {
		t.Errorf("a vendor token read /metrics: %d", resp.StatusCode)
	}
	if resp, _ := r.do("GET", "/dashboard", nil, testToken); resp.StatusCode != 200 {
		t.Errorf("the server token: %d", resp.StatusCode)
	}
	dom := dashboardtest.ChromiumDOM(t, []byte(all))
	if strings.Contains(dom, "<script") || !strings.Contains(dom, `data-agent="gpu-node-3-gpu0"`) {
		t.Errorf("Chromium's DOM:\n%s", dom)
	}
}
