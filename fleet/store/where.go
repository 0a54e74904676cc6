package store

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Off is --store's value that keeps no history.
const Off = "off"

// ErrTwoStores: --store and --database-url both given.
var ErrTwoStores = errors.New("--store and --database-url name two stores: give one")

// Where is what the operator said about the store (--store,
// --database-url or KBGEN_DATABASE_URL) and the environment that locates
// the default file (XDG_STATE_HOME, else HOME's ~/.local/state).
type Where struct {
	Path, DSN       string
	StateHome, Home string
}

// Resolve fills o's Path or DSN from w. It returns why nothing is kept,
// with o untouched, for --store off or when no state directory is known.
func (w Where) Resolve(o *Options) (none string, err error) {
	switch {
	case w.DSN != "" && w.Path != "":
		return "", ErrTwoStores
	case w.DSN != "":
		o.DSN = w.DSN
	case w.Path == Off:
		return "no store (--store off): history is kept in memory only", nil
	case w.Path != "":
		o.Path = w.Path
	default:
		dir := w.StateHome
		if dir == "" && w.Home != "" {
			dir = filepath.Join(w.Home, ".local", "state")
		}
		if dir == "" {
			return "no store: neither XDG_STATE_HOME nor HOME is set and no --store or --database-url is given; history is kept in memory only", nil
		}
		o.Path = DefaultPath(dir, o.Service)
	}
	return "", nil
}

// Describe is the start-up line naming where st keeps its history.
func (o Options) Describe(st *Store) string {
	where := o.Path
	if o.DSN != "" {
		where = "PostgreSQL (--database-url)"
	}
	return fmt.Sprintf("store: %s (%s, runs kept %s)", where, st.Kind(), o.Retention)
}
