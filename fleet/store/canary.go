package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/fleet/canary"
)

// CanaryRetention is how long canary points are kept: far longer than
// runs, since a context's baseline is its first quiet points and a
// driver can stay for months; at a canary every 6 hours that is 720
// small rows an agent.
const CanaryRetention = 180 * 24 * time.Hour

// RecordCanary keeps a finished canary's point; the same run again
// replaces it.
func (s *Store) RecordCanary(ctx context.Context, p canary.Point) error {
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if _, err := s.exec(ctx, `INSERT INTO canary_points (run_id, agent, at, data) VALUES ($1, $2, $3, $4)
		ON CONFLICT (run_id) DO UPDATE SET agent = excluded.agent, at = excluded.at, data = excluded.data`,
		p.RunID, p.Agent, ms(p.At), string(data)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// CanaryPoints is every kept point at or after since, by agent and time.
func (s *Store) CanaryPoints(ctx context.Context, since time.Time) ([]canary.Point, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT data FROM canary_points WHERE at >= $1 ORDER BY agent, at, run_id`), ms(since))
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	var out []canary.Point
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		var p canary.Point
		if err := json.Unmarshal([]byte(data), &p); err != nil {
			return nil, fmt.Errorf("store: canary point: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// PruneCanaries drops the points older than CanaryRetention before now.
func (s *Store) PruneCanaries(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.exec(ctx, `DELETE FROM canary_points WHERE at < $1`, ms(now.Add(-CanaryRetention)))
	if err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
