package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Run is one run the service saw end.
type Run struct {
	ID         string
	Queue      string
	Outcome    string // kbgen submit's status: obtained, runner_failed, infra, timed_out
	Build      int
	FinishedAt time.Time
	// Wait is its eval job's wait for an agent, Detection how long after
	// Buildkite's finished_at the service saw it; 0: not known.
	Wait, Detection time.Duration
	Attempts        []Attempt
}

// Attempt is one eval attempt's facts (fleet/runfacts).
type Attempt struct {
	Attempt           int
	Agent, Queue      string
	Node              string
	Exit              *int
	Noise             string
	Xids              int
	ClockEventSeconds float64
}

// RecordRun keeps a run and its attempts; recording the same run again
// replaces it (a restart that sees a build finish twice).
func (s *Store) RecordRun(ctx context.Context, r Run) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM attempts WHERE run_id = $1`), r.ID); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO runs (run_id, queue, outcome, build, finished_at, wait_ms, detection_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (run_id) DO UPDATE SET queue = excluded.queue, outcome = excluded.outcome, build = excluded.build,
		finished_at = excluded.finished_at, wait_ms = excluded.wait_ms, detection_ms = excluded.detection_ms`),
		r.ID, r.Queue, r.Outcome, r.Build, ms(r.FinishedAt), durMS(r.Wait), durMS(r.Detection)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	for _, a := range r.Attempts {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO attempts (run_id, attempt, agent, queue, node, exit, noise, xids, clock_event_seconds, finished_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`),
			r.ID, a.Attempt, a.Agent, a.Queue, a.Node, a.Exit, a.Noise, a.Xids, a.ClockEventSeconds, ms(r.FinishedAt)); err != nil {
			return fmt.Errorf("store: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

func durMS(d time.Duration) sql.NullInt64 {
	if d <= 0 {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: d.Milliseconds(), Valid: true}
}

// RunsSince is the runs that finished at or after since, oldest first,
// with their attempts, at most limit.
func (s *Store) RunsSince(ctx context.Context, since time.Time, limit int) ([]Run, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id, queue, outcome, build, finished_at, wait_ms, detection_ms FROM runs
		WHERE finished_at >= $1 ORDER BY finished_at, run_id LIMIT $2`), ms(since), limit)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	var out []Run
	byID := map[string]int{}
	for rows.Next() {
		var r Run
		var fin int64
		var wait, det sql.NullInt64
		if err := rows.Scan(&r.ID, &r.Queue, &r.Outcome, &r.Build, &fin, &wait, &det); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		r.FinishedAt = fromMS(fin)
		r.Wait, r.Detection = time.Duration(wait.Int64)*time.Millisecond, time.Duration(det.Int64)*time.Millisecond
		byID[r.ID] = len(out)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return out, s.attachAttempts(ctx, since, out, byID)
}

func (s *Store) attachAttempts(ctx context.Context, since time.Time, runs []Run, byID map[string]int) error {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id, attempt, agent, queue, node, exit, noise, xids, clock_event_seconds FROM attempts
		WHERE finished_at >= $1 ORDER BY run_id, attempt`), ms(since))
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var a Attempt
		var exit sql.NullInt64
		if err := rows.Scan(&id, &a.Attempt, &a.Agent, &a.Queue, &a.Node, &exit, &a.Noise, &a.Xids, &a.ClockEventSeconds); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if exit.Valid {
			e := int(exit.Int64)
			a.Exit = &e
		}
		if i, ok := byID[id]; ok {
			runs[i].Attempts = append(runs[i].Attempts, a)
		}
	}
	return rows.Err()
}

// Prune drops the runs (and their attempts), the answered deliveries and
// the verifications older than the retention before now, and reports how
// many runs.
func (s *Store) Prune(ctx context.Context, now time.Time) (int64, error) {
	cut := ms(now.Add(-s.retention))
	if _, err := s.exec(ctx, `DELETE FROM attempts WHERE finished_at < $1`, cut); err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	if _, err := s.exec(ctx, `DELETE FROM deliveries WHERE delivered_at IS NOT NULL AND delivered_at < $1`, cut); err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	if _, err := s.exec(ctx, `DELETE FROM verifications WHERE started_at < $1`, cut); err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	res, err := s.exec(ctx, `DELETE FROM runs WHERE finished_at < $1`, cut)
	if err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
