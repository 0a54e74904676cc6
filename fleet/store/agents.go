package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/fleet/roster"
)

// PutAgent keeps the roster's record of one agent (the latest wins).
func (s *Store) PutAgent(ctx context.Context, a roster.Agent) error {
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if _, err := s.exec(ctx, `INSERT INTO agents (name, data, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`, a.Name, string(data), time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Agents is the kept roster.
func (s *Store) Agents(ctx context.Context) ([]roster.Agent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT data FROM agents ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	var out []roster.Agent
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		var a roster.Agent
		if err := json.Unmarshal([]byte(data), &a); err != nil {
			return nil, fmt.Errorf("store: agent record: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
