package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// migration is one schema step; version numbers only grow and a step,
// once released, never changes.
type migration struct {
	version int
	stmts   []string
}

// migrations are kbgen's schema, in both dialects (TEXT, BIGINT, INTEGER,
// DOUBLE PRECISION and ON CONFLICT mean the same in SQLite and
// PostgreSQL). Times are Unix milliseconds.
var migrations = []migration{
	{1, []string{
		`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`CREATE TABLE runs (
			run_id TEXT PRIMARY KEY,
			queue TEXT NOT NULL,
			outcome TEXT NOT NULL,
			build INTEGER NOT NULL,
			finished_at BIGINT NOT NULL,
			wait_ms BIGINT,
			detection_ms BIGINT)`,
		`CREATE INDEX runs_finished ON runs (finished_at)`,
		`CREATE TABLE attempts (
			run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
			attempt INTEGER NOT NULL,
			agent TEXT NOT NULL,
			queue TEXT NOT NULL,
			node TEXT NOT NULL,
			exit INTEGER,
			noise TEXT NOT NULL,
			xids INTEGER NOT NULL,
			clock_event_seconds DOUBLE PRECISION NOT NULL,
			finished_at BIGINT NOT NULL,
			PRIMARY KEY (run_id, attempt))`,
		`CREATE INDEX attempts_agent ON attempts (agent, finished_at)`,
	}},
	// The roster (fleet/roster): one row an agent, its record as JSON so
	// that a field added to roster.Agent needs no migration.
	{2, []string{
		`CREATE TABLE agents (name TEXT PRIMARY KEY, data TEXT NOT NULL, updated_at BIGINT NOT NULL)`,
	}},
	// The alert ledger (fleet/alert): the alarms now, and every message
	// for every channel, kept once delivered (delivered_at) for the
	// record until the retention.
	{3, []string{
		`CREATE TABLE alarms (id TEXT PRIMARY KEY, data TEXT NOT NULL)`,
		`CREATE TABLE deliveries (seq BIGINT PRIMARY KEY, channel TEXT NOT NULL, message TEXT NOT NULL, created_at BIGINT NOT NULL, delivered_at BIGINT)`,
		`CREATE INDEX deliveries_pending ON deliveries (delivered_at, seq)`,
	}},
	// The canaries (fleet/canary): one row a finished canary, the point
	// as JSON (a field added to canary.Point needs no migration).
	{4, []string{
		`CREATE TABLE canary_points (run_id TEXT PRIMARY KEY, agent TEXT NOT NULL, at BIGINT NOT NULL, data TEXT NOT NULL)`,
		`CREATE INDEX canary_points_agent ON canary_points (agent, at)`,
	}},
	// Re-measurements (fleet/verify): one row a verified run, its
	// verify.Record as JSON, rewritten as its re-runs finish.
	{5, []string{
		`CREATE TABLE verifications (run_id TEXT PRIMARY KEY, started_at BIGINT NOT NULL, data TEXT NOT NULL)`,
		`CREATE INDEX verifications_started ON verifications (started_at)`,
	}},
}

// ErrNewerSchema is a database a newer kbgen migrated.
var ErrNewerSchema = errors.New("store: the database's schema is newer than this kbgen's")

// migrate runs the migrations the database has not had, each in its own
// transaction with its version row, so a crash leaves whole steps only.
func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("store: migrations table: %w", err)
	}
	var have int
	if err := s.query(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("store: schema version: %w", err)
	}
	if latest := migrations[len(migrations)-1].version; have > latest {
		return fmt.Errorf("%w: version %d, newer than this kbgen's %d: run the newer kbgen", ErrNewerSchema, have, latest)
	}
	for _, m := range migrations {
		if m.version <= have {
			continue
		}
		if err := s.apply(ctx, m); err != nil {
			return fmt.Errorf("store: migration %d: %w", m.version, err)
		}
	}
	return nil
}

func (s *Store) apply(ctx context.Context, m migration) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, st := range m.stmts {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`), m.version, time.Now().UnixMilli()); err != nil {
		return err
	}
	return tx.Commit()
}

// SchemaVersion is the database's migration version.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.query(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}
