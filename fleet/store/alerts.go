package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
)

// AlertLedger is the store as fleet/alert's ledger: alarms and deliveries
// in one transaction, so a restart neither loses a message nor repeats
// one that was delivered.
func (s *Store) AlertLedger() alert.Ledger { return alertLedger{s} }

type alertLedger struct{ s *Store }

// ledgerTimeout bounds one ledger call: the engine and sender run on
// their own timers, not a request's context.
const ledgerTimeout = 10 * time.Second

func (l alertLedger) Alarms() ([]alert.Alarm, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	rows, err := l.s.db.QueryContext(ctx, `SELECT data FROM alarms ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []alert.Alarm
	for rows.Next() {
		var data string
		var a alert.Alarm
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(data), &a); err != nil {
			return nil, fmt.Errorf("alarm record: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

func (l alertLedger) Record(alarms []alert.Alarm, gone []string, ds []alert.Delivery) error {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	tx, err := l.s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, a := range alarms {
		data, _ := json.Marshal(a)
		if _, err := tx.ExecContext(ctx, l.s.q(`INSERT INTO alarms (id, data) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET data = excluded.data`), a.ID, string(data)); err != nil {
			return err
		}
	}
	for _, id := range gone {
		if _, err := tx.ExecContext(ctx, l.s.q(`DELETE FROM alarms WHERE id = $1`), id); err != nil {
			return err
		}
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM deliveries`).Scan(&seq); err != nil {
		return err
	}
	for _, d := range ds {
		seq++
		msg, _ := json.Marshal(d.Message)
		if _, err := tx.ExecContext(ctx, l.s.q(`INSERT INTO deliveries (seq, channel, message, created_at) VALUES ($1, $2, $3, $4)`), seq, d.Channel, string(msg), time.Now().UnixMilli()); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (l alertLedger) Pending() ([]alert.Delivery, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	rows, err := l.s.db.QueryContext(ctx, `SELECT seq, channel, message FROM deliveries WHERE delivered_at IS NULL ORDER BY seq LIMIT 1000`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []alert.Delivery
	for rows.Next() {
		var d alert.Delivery
		var msg string
		if err := rows.Scan(&d.Seq, &d.Channel, &msg); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(msg), &d.Message); err != nil {
			return nil, fmt.Errorf("delivery %d: %w", d.Seq, err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func (l alertLedger) Delivered(seq int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	_, err := l.s.exec(ctx, `UPDATE deliveries SET delivered_at = $1 WHERE seq = $2`, sql.NullInt64{Int64: time.Now().UnixMilli(), Valid: true}, seq)
	return err
}
