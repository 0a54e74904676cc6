package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// TestServeFleetEndToEnd: the kbgen binary with --store and
// KBGEN_VIEW_TOKEN: the view token scrapes /metrics and opens /dashboard,
// cannot submit; a finished run is in the store after the service stops.
func TestServeFleetEndToEnd(t *testing.T) {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Finish: 400 * time.Millisecond})
	db := filepath.Join(t.TempDir(), "fleet.db")
	p := startServe(t, kbgenbin.Path(t), fake, map[string]string{"KBGEN_SERVER_TOKEN": "server-tok", "KBGEN_VIEW_TOKEN": "view-tok-0123456789"},
		"--listen", "127.0.0.1:0", "--store", db)
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest("GET", p.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	good := runKbgen(t, map[string]string{"KBGEN_SERVER_TOKEN": "server-tok"}, serveJob(t), "submit", "--server", p.url, "--queue", "h100", "-f", "-", "-q")
	if good.code != 0 {
		t.Fatalf("submit: exit %d: %s", good.code, good.stderr)
	}
	if code, body := get("/metrics", "view-tok-0123456789"); code != 200 || !strings.Contains(body, `kbgen_runs_total{outcome="obtained",queue="nvidia-h100"} 1`) {
		t.Fatalf("scrape with the view token: %d\n%s", code, body)
	}
	if code, body := get("/dashboard", "view-tok-0123456789"); code != 200 || !strings.Contains(body, "<h1>kbgen fleet") {
		t.Fatalf("dashboard: %d\n%s", code, body)
	}
	bad := runKbgen(t, map[string]string{"KBGEN_SERVER_TOKEN": "view-tok-0123456789"}, serveJob(t), "submit", "--server", p.url, "--queue", "h100", "-f", "-", "-q")
	if bad.code == 0 {
		t.Fatal("the view token submitted a run")
	}
	if !strings.Contains(p.stderr.String(), "store: "+db+" (sqlite") {
		t.Errorf("the log does not say where the store is:\n%s", p.stderr.String())
	}
	var runs []fleetstore.Run
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(runs) == 0; time.Sleep(50 * time.Millisecond) {
		if st, err := fleetstore.Open(context.Background(), fleetstore.Options{Path: db, Service: "kbgen"}); err == nil {
			runs, _ = st.RunsSince(context.Background(), time.Time{}, 10)
			st.Close()
		}
	}
	if len(runs) != 1 || runs[0].Outcome != "obtained" {
		t.Errorf("the store holds %+v, want the one obtained run", runs)
	}
}
