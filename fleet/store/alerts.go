package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
)

// AlertLedger is the store as fleet/alert's ledger (migration 3): the
// firing alarms in alarms, one row each, and every delivery in
// deliveries by its Seq (channel: its receiver; message: the delivery as
// JSON; delivered_at: when it was answered, NULL while pending), each
// Save in one transaction, so a restart neither loses a message nor
// repeats one that was answered.
func (s *Store) AlertLedger() alert.Ledger { return alertLedger{s} }

type alertLedger struct{ s *Store }

// ledgerTimeout bounds one ledger call: the alerter runs on its own
// timer, not a request's context.
const ledgerTimeout = 10 * time.Second

// Load is the firing alarms and the deliveries kept, by Seq.
func (l alertLedger) Load() (alert.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	var st alert.State
	err := l.rows(ctx, `SELECT data FROM alarms ORDER BY id`, func(data string) error {
		var a alert.Alarm
		st.Firing = append(st.Firing, a)
		return json.Unmarshal([]byte(data), &st.Firing[len(st.Firing)-1])
	})
	if err != nil {
		return alert.State{}, fmt.Errorf("store: alarms: %w", err)
	}
	err = l.rows(ctx, `SELECT message FROM deliveries ORDER BY seq`, func(data string) error {
		var d alert.Delivery
		st.Deliveries = append(st.Deliveries, d)
		return json.Unmarshal([]byte(data), &st.Deliveries[len(st.Deliveries)-1])
	})
	if err != nil {
		return alert.State{}, fmt.Errorf("store: deliveries: %w", err)
	}
	return st, nil
}

// rows calls each with the one text column of query's rows.
func (l alertLedger) rows(ctx context.Context, query string, each func(string) error) error {
	rows, err := l.s.db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return err
		}
		if err := each(data); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Save replaces the firing alarms, writes the changed deliveries and
// drops those answered before keepFrom, in one transaction.
func (l alertLedger) Save(firing []alert.Alarm, changed []alert.Delivery, keepFrom time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	tx, err := l.s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM alarms`); err != nil {
		return err
	}
	for _, a := range firing {
		data, _ := json.Marshal(a) // strings and times only: cannot fail
		if _, err := tx.ExecContext(ctx, l.s.q(`INSERT INTO alarms (id, data) VALUES ($1, $2)`), a.ID, string(data)); err != nil {
			return err
		}
	}
	for _, d := range changed {
		if err := l.put(ctx, tx, d); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, l.s.q(`DELETE FROM deliveries WHERE delivered_at IS NOT NULL AND delivered_at < $1`), ms(keepFrom)); err != nil {
		return err
	}
	return tx.Commit()
}

func (l alertLedger) put(ctx context.Context, tx *sql.Tx, d alert.Delivery) error {
	msg, _ := json.Marshal(d) // strings and times only: cannot fail
	var answered sql.NullInt64
	if !d.SentAt.IsZero() {
		answered = sql.NullInt64{Int64: ms(d.SentAt), Valid: true}
	}
	_, err := tx.ExecContext(ctx, l.s.q(`INSERT INTO deliveries (seq, channel, message, created_at, delivered_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (seq) DO UPDATE SET message = excluded.message, delivered_at = excluded.delivered_at`),
		d.Seq, d.Receiver, string(msg), ms(d.Transition.At), answered)
	return err
}
