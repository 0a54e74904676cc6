package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/fleet/verify"
)

// PutVerification keeps a verification (migration 5); the same run again
// replaces it, as its re-runs finish.
func (s *Store) PutVerification(ctx context.Context, rec verify.Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if _, err := s.exec(ctx, `INSERT INTO verifications (run_id, started_at, data) VALUES ($1, $2, $3)
		ON CONFLICT (run_id) DO UPDATE SET started_at = excluded.started_at, data = excluded.data`,
		rec.RunID, ms(rec.StartedAt), string(data)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Verifications is every kept verification started at or after since,
// oldest first.
func (s *Store) Verifications(ctx context.Context, since time.Time) ([]verify.Record, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT data FROM verifications WHERE started_at >= $1 ORDER BY started_at, run_id`), ms(since))
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	var out []verify.Record
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		var rec verify.Record
		if err := json.Unmarshal([]byte(data), &rec); err != nil {
			return nil, fmt.Errorf("store: verification: %w", err)
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}
