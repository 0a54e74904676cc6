package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// TestServeAlertsRefusals: a bad alerts config is a usage error (exit 2)
// that says what is wrong, before anything listens, and never repeats a
// webhook URL (a Slack URL is its credential).
func TestServeAlertsRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{"BUILDKITE_API_TOKEN": "t", "BUILDKITE_ORG": "o", "BUILDKITE_PIPELINE": "p", "KBGEN_SERVER_TOKEN": "tok", "HOME": dir}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"missing file", filepath.Join(dir, "nope.yml"), "no such file"},
		{"bad kind", write("kind.yml", "receivers:\n- {name: s, kind: email, url: 'https://hooks.slack.com/services/T/B/SECRET'}\n"), `kind "email"`},
		{"bad url file", write("urlfile.yml", "receivers:\n- {name: s, kind: slack, url_file: "+write("url", "ftp://SECRET\n")+"}\n"), "not an absolute http(s) URL"},
		{"route to nobody", write("route.yml", "receivers:\n- {name: s, kind: slack, url: 'https://h/SECRET'}\nroutes:\n- {vendors: [NVIDIA], receivers: [t]}\n"), `receiver "t", which is not defined`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runKbgen(t, env, "", "serve", "--listen", "127.0.0.1:0", "--store", "off", "--alerts", tc.file)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "SECRET") {
				t.Fatalf("exit %d, want 2 and %q without the URL: %s", r.code, tc.want, r.stderr)
			}
		})
	}
}

// TestServeAlertsResendsPending: a real kbgen serve started on a store
// whose alert ledger holds one pending delivery sends it to its receiver
// at start, once, marks it sent in the store, and logs neither the
// receiver's URL nor more than its name.
func TestServeAlertsResendsPending(t *testing.T) {
	var mu sync.Mutex
	var got []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Header.Get(alert.DeliveryHeader))
	}))
	defer recv.Close()
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "ops.url")
	cfgFile := filepath.Join(dir, "alerts.yml")
	if err := os.WriteFile(urlFile, []byte(recv.URL+"/hooks/SECRET-path\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgFile, []byte("receivers:\n- {name: ops, kind: webhook, url_file: "+urlFile+"}\nroutes:\n- {receivers: [ops]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(dir, "serve.db")
	st, err := fleetstore.Open(context.Background(), fleetstore.Options{Path: dbPath, Service: "kbgen"})
	if err != nil {
		t.Fatal(err)
	}
	tr := alert.Transition{Status: alert.Firing, At: time.Now(), Alarm: alert.Alarm{ID: "0123456789abcdef", Condition: alert.QueueNoAgents, Labels: map[string]string{"queue": "nvidia-h100"}, Summary: "queue nvidia-h100 has no connected agent", Since: time.Now()}}
	pending := alert.Delivery{Seq: 1, ID: alert.DeliveryID(tr, "ops"), Receiver: "ops", Transition: tr}
	if err := st.AlertLedger().Save([]alert.Alarm{tr.Alarm}, []alert.Delivery{pending}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	p := startServe(t, kbgenbin.Path(t), fake, map[string]string{"KBGEN_SERVER_TOKEN": "tok"}, "--listen", "127.0.0.1:0", "--store", dbPath,
		"--alerts", cfgFile)
	// Wait for the ledger to say sent: the send is before the write.
	st, err = fleetstore.Open(context.Background(), fleetstore.Options{Path: dbPath, Service: "kbgen"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var kept alert.State
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if s, err := st.AlertLedger().Load(); err == nil && len(s.Deliveries) == 1 && !s.Deliveries[0].SentAt.IsZero() {
			kept = s
			break
		}
	}
	if len(kept.Deliveries) != 1 {
		t.Fatalf("the store's ledger never marked the delivery sent\n%s", p.stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != pending.ID {
		t.Fatalf("receiver got %q, want the pending delivery %s once\n%s", got, pending.ID, p.stderr.String())
	}
	log := p.stderr.String()
	if !strings.Contains(log, "alerts: 1 receivers, 1 routes, ledger in the store, 1 pending") || strings.Contains(log, "SECRET") {
		t.Errorf("log does not say the alerts started, or shows the URL:\n%s", log)
	}
}
