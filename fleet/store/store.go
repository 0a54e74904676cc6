package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"
)

// DefaultRetention is how long runs are kept.
const DefaultRetention = 30 * 24 * time.Hour

// Options say which database to open.
type Options struct {
	// Path is the SQLite file (made with its directory, mode 0600); DSN,
	// when set, a PostgreSQL URL or key=value string instead.
	Path, DSN string
	// Service is kbgen serve's --name: a database made by another
	// service is refused.
	Service string
	// Retention bounds the age of kept runs (Prune); default
	// DefaultRetention.
	Retention time.Duration
}

// Store is an open database.
type Store struct {
	db        *sql.DB
	postgres  bool
	retention time.Duration
}

// DefaultPath is the SQLite file of service under stateDir
// ($XDG_STATE_HOME or ~/.local/state, then kbgen/): one file per service
// name, so two services on one host never share one.
func DefaultPath(stateDir, service string) string {
	return filepath.Join(stateDir, "kbgen", "serve-"+service+".db")
}

// ErrOtherService is a database another service made.
var ErrOtherService = errors.New("store: the database belongs to another service")

// Open opens (making when new) the database, runs its migrations and
// checks its service.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Service == "" {
		return nil, errors.New("store: a service name is required")
	}
	s := &Store{postgres: o.DSN != "", retention: o.Retention}
	if s.retention <= 0 {
		s.retention = DefaultRetention
	}
	var err error
	if s.postgres {
		s.db, err = sql.Open("pgx", o.DSN)
	} else {
		s.db, err = openSQLite(o.Path)
	}
	if err != nil {
		return nil, err
	}
	if err := s.init(ctx, o.Service); err != nil {
		s.db.Close()
		if s.postgres {
			return nil, fmt.Errorf("%s: %w", redactDSN(o.DSN), err)
		}
		return nil, fmt.Errorf("%s: %w", o.Path, err)
	}
	return s, nil
}

func openSQLite(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("store: a SQLite path or a PostgreSQL DSN is required")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	f.Close()
	// WAL: a scrape or the dashboard reads while a run is written; the
	// busy timeout waits out a writer instead of failing.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// One writer at a time is SQLite's rule; one connection keeps
	// database/sql from queueing writers against SQLITE_BUSY.
	db.SetMaxOpenConns(1)
	return db, nil
}

func (s *Store) init(ctx context.Context, service string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	return s.claim(ctx, service)
}

// claim records service as the database's owner, or refuses another.
func (s *Store) claim(ctx context.Context, service string) error {
	if _, err := s.exec(ctx, `INSERT INTO meta (key, value) VALUES ('service', $1) ON CONFLICT (key) DO NOTHING`, service); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	var owner string
	if err := s.query(ctx, `SELECT value FROM meta WHERE key = 'service'`).Scan(&owner); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if owner != service {
		return fmt.Errorf("%w %q, not %q: give this service its own --store or --database-url", ErrOtherService, owner, service)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Kind is "sqlite" or "postgres".
func (s *Store) Kind() string {
	if s.postgres {
		return "postgres"
	}
	return "sqlite"
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

// q is query text in the database's placeholders: written with
// PostgreSQL's $N, which SQLite spells ?N.
func (s *Store) q(query string) string {
	if s.postgres {
		return query
	}
	return placeholder.ReplaceAllString(query, "?$1")
}

func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.db.ExecContext(ctx, s.q(query), args...)
}

func (s *Store) query(ctx context.Context, query string, args ...any) *sql.Row {
	return s.db.QueryRowContext(ctx, s.q(query), args...)
}

// ms is t as Unix milliseconds, the stored time (0: none).
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// redactDSN is a DSN for messages: the password never leaves.
func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn, "@"); at > i {
			return dsn[:i+3] + "…@" + dsn[at+1:]
		}
	}
	return "(DSN)"
}
