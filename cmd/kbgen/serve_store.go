package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/dashboard"
	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// loadVendorTokens reads --vendor-tokens (none when path is "").
func loadVendorTokens(path string) ([]dashboard.Scope, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, fmt.Errorf("--vendor-tokens: %w", err))
	}
	defer f.Close()
	scopes, err := dashboard.LoadVendorTokens(f)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, fmt.Errorf("--vendor-tokens %s: %w", path, err))
	}
	return scopes, nil
}

// loadAlerts reads --alerts and its receivers' url_files (nil when path
// is ""); its errors never repeat a receiver's URL.
func loadAlerts(path string) (*alert.Config, error) {
	if path == "" {
		return nil, nil
	}
	c, err := alert.LoadConfig(path)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, fmt.Errorf("--alerts: %w", err))
	}
	return &c, nil
}

// storeOff is --store's value that keeps no history.
const storeOff = "off"

// openStore opens kbgen serve's store: PostgreSQL when --database-url
// (or KBGEN_DATABASE_URL) is set, else SQLite at --store or the default
// path for this service's name; nil with --store off, or when no state
// directory is known (nothing is kept, and the log says so).
func (c *ServeCmd) openStore(ctx context.Context, g *Globals) (*fleetstore.Store, string, error) {
	o := fleetstore.Options{Service: c.Name, Retention: c.Retention, DSN: g.Getenv(contract.EnvDatabaseURL)}
	if c.DatabaseURL != "" {
		o.DSN = c.DatabaseURL
	}
	if o.DSN != "" && c.Store != "" {
		return nil, "", exitcode.With(exitcode.Usage, fmt.Errorf("--store and --database-url name two stores: give one"))
	}
	switch {
	case o.DSN != "":
	case c.Store == storeOff:
		return nil, "no store (--store off): history is kept in memory only", nil
	case c.Store != "":
		o.Path = c.Store
	default:
		dir := g.Getenv("XDG_STATE_HOME")
		if home := g.Getenv("HOME"); dir == "" && home != "" {
			dir = filepath.Join(home, ".local", "state")
		}
		if dir == "" {
			return nil, "no store: neither XDG_STATE_HOME nor HOME is set and no --store or --database-url is given; history is kept in memory only", nil
		}
		o.Path = fleetstore.DefaultPath(dir, c.Name)
	}
	st, err := fleetstore.Open(ctx, o)
	switch {
	case errors.Is(err, fleetstore.ErrOtherService), errors.Is(err, fleetstore.ErrNewerSchema):
		return nil, "", exitcode.With(exitcode.Usage, err)
	case err != nil:
		// An unreachable or unwritable database: try again later (75),
		// as systemd's Restart= does.
		return nil, "", exitcode.With(exitcode.TempFail, err)
	}
	where := o.Path
	if o.DSN != "" {
		where = "PostgreSQL (--database-url)"
	}
	return st, fmt.Sprintf("store: %s (%s, runs kept %s)", where, st.Kind(), c.Retention), nil
}
