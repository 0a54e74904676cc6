package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/canary"
	"github.com/gpu-mode/kbgen/fleet/roster"
	"github.com/gpu-mode/kbgen/fleet/verify"
)

// TestRunsRoundTrip: a run and its attempts come back as kept, a second
// record of the same run replaces it, and Prune drops what is older than
// the retention, on both databases.
func TestRunsRoundTrip(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) {
			o := opts(t, "kbgen")
			o.Retention = time.Hour
			s := open(t, o)
			ctx := context.Background()
			now := time.Now().UTC().Truncate(time.Millisecond)
			fault, ok := 75, 0
			r := Run{ID: "r1", Queue: "nvidia-h100", Outcome: "obtained", Build: 7, FinishedAt: now, Wait: 1500 * time.Millisecond, Detection: 200 * time.Millisecond,
				Attempts: []Attempt{{Attempt: 1, Agent: "a0", Queue: "nvidia-h100", Node: "n", Exit: &fault, Noise: "noisy", Xids: 1, ClockEventSeconds: 0.5},
					{Attempt: 2, Agent: "a1", Queue: "nvidia-h100", Node: "n", Exit: &ok, Noise: "clean"}}}
			old := Run{ID: "r0", Queue: "nvidia-h100", Outcome: "infra", Build: 6, FinishedAt: now.Add(-2 * time.Hour)}
			for _, x := range []Run{old, r, r} {
				if err := s.RecordRun(ctx, x); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.RunsSince(ctx, now.Add(-3*time.Hour), 100)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]Run{old, r}, got); d != "" {
				t.Errorf("runs (-want +got):\n%s", d)
			}
			if n, err := s.Prune(ctx, now); err != nil || n != 1 {
				t.Fatalf("pruned %d, %v; want the 2-hour-old run", n, err)
			}
			if got, _ := s.RunsSince(ctx, time.Time{}, 100); len(got) != 1 || got[0].ID != "r1" || len(got[0].Attempts) != 2 {
				t.Errorf("after prune: %+v", got)
			}
		})
	}
}

// TestServiceOwnsItsDatabase: a database another service made is refused
// with a message that says what to do; its own service reopens it.
func TestServiceOwnsItsDatabase(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) {
			o := opts(t, "kbgen")
			s, err := Open(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			o.Service = "kbgen-staging"
			// The message is the contract: it names the service that owns the database.
			if _, err := Open(context.Background(), o); !errors.Is(err, ErrOtherService) || !strings.Contains(err.Error(), `"kbgen"`) {
				t.Fatalf("another service opened it: %v", err)
			}
			o.Service = "kbgen"
			s = open(t, o)
			if v, err := s.SchemaVersion(context.Background()); err != nil || v != migrations[len(migrations)-1].version {
				t.Errorf("schema version %d, %v", v, err)
			}
		})
	}
}

// TestNewerSchemaRefused: a database migrated by a newer kbgen is not
// touched by an older one.
func TestNewerSchemaRefused(t *testing.T) {
	o := Options{Path: filepath.Join(t.TempDir(), "s.db"), Service: "kbgen"}
	s := open(t, o)
	if _, err := s.exec(context.Background(), `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, 0)`, 999); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(context.Background(), o); !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("opened a newer schema: %v", err)
	}
}

// TestSQLiteFileMode: the database file is the service's alone, and the
// default path is one file per service name.
func TestSQLiteFileMode(t *testing.T) {
	t.Parallel()
	p := DefaultPath(t.TempDir(), "kbgen")
	open(t, Options{Path: p, Service: "kbgen"})
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", p, st.Mode(), err)
	}
	if DefaultPath("/s", "a") == DefaultPath("/s", "b") {
		t.Error("two service names share a default path")
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	if got := redactDSN("postgres://kbgen:hunter2@db:5432/kbgen"); strings.Contains(got, "hunter2") || !strings.Contains(got, "db:5432") {
		t.Errorf("redacted %q", got)
	}
}

// TestAgentsRoundTrip: the roster's records come back as kept, the latest
// of an agent winning, on both databases.
func TestAgentsRoundTrip(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, opts(t, "kbgen"))
			ctx := context.Background()
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			a := roster.Agent{Name: "h100-0", Queue: "nvidia-h100", FirstSeen: at, LastSeen: at, Paused: true, Quarantined: true, PauseNote: "faults", PausedUntil: at.Add(time.Hour)}
			b := roster.Agent{Name: "h100-1", Queue: "nvidia-h100", FirstSeen: at, LastSeen: at, Lost: true, LostAt: at, LostWhy: "webhook"}
			for _, x := range []roster.Agent{a, b, a} {
				if err := s.PutAgent(ctx, x); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.Agents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]roster.Agent{a, b}, got); d != "" {
				t.Errorf("agents (-want +got):\n%s", d)
			}
		})
	}
}

// TestAlertLedger: the store keeps the firing alarms and the deliveries
// across a reopen (a restart), an answered delivery stays answered, a
// pending one pending, and only answered ones are dropped, on both
// databases.
func TestAlertLedger(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) {
			o := opts(t, "kbgen")
			s := open(t, o)
			l := s.AlertLedger()
			since := time.Unix(1, 0).UTC()
			a := alert.Alarm{ID: alert.AlarmID(alert.QueueNoAgents, map[string]string{"queue": "q"}), Condition: alert.QueueNoAgents,
				Labels: map[string]string{"queue": "q"}, Summary: "queue q has no connected agent", Since: since, FiredAt: since.Add(10 * time.Minute)}
			tr := alert.Transition{Alarm: a, Status: alert.Firing, At: a.FiredAt}
			ops := alert.Delivery{Seq: 1, ID: alert.DeliveryID(tr, "ops"), Receiver: "ops", Transition: tr}
			amd := alert.Delivery{Seq: 2, ID: alert.DeliveryID(tr, "amd"), Receiver: "amd", Transition: tr}
			if err := l.Save([]alert.Alarm{a}, []alert.Delivery{amd, ops}, time.Time{}); err != nil {
				t.Fatal(err)
			}
			ops.Attempts, ops.SentAt = 1, since.Add(11*time.Minute)
			if err := l.Save([]alert.Alarm{a}, []alert.Delivery{ops}, time.Time{}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = open(t, o)
			l = s.AlertLedger()
			st, err := l.Load()
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(alert.State{Firing: []alert.Alarm{a}, Deliveries: []alert.Delivery{ops, amd}}, st); d != "" {
				t.Fatalf("after reopen (-want +got):\n%s", d)
			}
			if err := l.Save(nil, nil, ops.SentAt.Add(time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if st, _ := l.Load(); len(st.Firing) != 0 || len(st.Deliveries) != 1 || st.Deliveries[0].ID != amd.ID {
				t.Errorf("after resolving and pruning: %+v; want no alarm and amd's pending delivery only", st)
			}
		})
	}
}

// TestMigrationUpgrade: a database an older kbgen made (at each schema
// before the latest, with a run in it) is migrated to the latest schema on
// open, its run kept, and every later table (the roster's, the alert
// ledger's of migration 3, the canary points of migration 4, the
// verifications of migration 5) works.
func TestMigrationUpgrade(t *testing.T) {
	t.Parallel()
	for _, have := range migrations[:len(migrations)-1] {
		t.Run(fmt.Sprintf("from schema %d", have.version), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "old.db")
			oldSchema(t, path, have.version)
			s := open(t, Options{Path: path, Service: "kbgen"})
			ctx := context.Background()
			if v, _ := s.SchemaVersion(ctx); v != migrations[len(migrations)-1].version {
				t.Fatalf("schema %d after open, want %d", v, migrations[len(migrations)-1].version)
			}
			if runs, err := s.RunsSince(ctx, time.Time{}, 10); err != nil || len(runs) != 1 || runs[0].ID != "r1" {
				t.Fatalf("runs after the upgrade: %+v %v", runs, err)
			}
			if err := s.PutAgent(ctx, roster.Agent{Name: "a"}); err != nil {
				t.Errorf("the agents table: %v", err)
			}
			if _, err := s.AlertLedger().Load(); err != nil {
				t.Errorf("the alert ledger: %v", err)
			}
			if err := s.RecordCanary(ctx, canary.Point{Agent: "a", RunID: "c1", At: time.Now(), Score: 1}); err != nil {
				t.Errorf("the canary points: %v", err)
			}
			if err := s.PutVerification(ctx, verify.Record{RunID: "r1", StartedAt: time.Now(), Want: 3}); err != nil {
				t.Errorf("the verifications: %v", err)
			}
			if recs, err := s.Verifications(ctx, time.Time{}); err != nil || len(recs) != 1 || recs[0].Want != 3 {
				t.Errorf("the verifications read back: %+v %v", recs, err)
			}
		})
	}
}

// oldSchema makes the database at path as a kbgen at schema version did,
// with one run in it.
func oldSchema(t *testing.T, path string, version int) {
	t.Helper()
	db, err := openSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := &Store{db: db}
	ctx := context.Background()
	if _, err := old.exec(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations {
		if m.version <= version {
			if err := old.apply(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range []string{`INSERT INTO meta (key, value) VALUES ('service', 'kbgen')`,
		`INSERT INTO runs (run_id, queue, outcome, build, finished_at) VALUES ('r1', 'q', 'obtained', 1, 1000)`} {
		if _, err := old.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}
