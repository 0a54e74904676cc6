package store

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestWhereResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		where     Where
		path, dsn string
		none      bool
		err       error
	}{
		{"the default under XDG_STATE_HOME", Where{StateHome: "/state", Home: "/home/k"}, filepath.Join("/state", "kbgen", "serve-kb.db"), "", false, nil},
		{"else under HOME", Where{Home: "/home/k"}, filepath.Join("/home/k", ".local", "state", "kbgen", "serve-kb.db"), "", false, nil},
		{"neither: nothing kept", Where{}, "", "", true, nil},
		{"--store PATH", Where{Path: "/var/kb.db", StateHome: "/state"}, "/var/kb.db", "", false, nil},
		{"--store off", Where{Path: Off, StateHome: "/state"}, "", "", true, nil},
		{"a DSN", Where{DSN: "postgres://x", StateHome: "/state"}, "", "postgres://x", false, nil},
		{"both: refused", Where{DSN: "postgres://x", Path: "/var/kb.db"}, "", "", false, ErrTwoStores},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := Options{Service: "kb"}
			none, err := tt.where.Resolve(&o)
			if !errors.Is(err, tt.err) || (none != "") != tt.none || o.Path != tt.path || o.DSN != tt.dsn {
				t.Errorf("Resolve = %q, %v; Path %q DSN %q; want none %v, %v, Path %q DSN %q", none, err, o.Path, o.DSN, tt.none, tt.err, tt.path, tt.dsn)
			}
		})
	}
}
