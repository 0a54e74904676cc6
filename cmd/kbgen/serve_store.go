package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

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

// openStore opens kbgen serve's store (fleet/store's Where says which:
// PostgreSQL by --database-url or KBGEN_DATABASE_URL, else SQLite at
// --store or the default path for this service's name); nil, with why,
// when nothing is kept.
func (c *ServeCmd) openStore(ctx context.Context, g *Globals) (*fleetstore.Store, string, error) {
	o := fleetstore.Options{Service: c.Name, Retention: c.Retention}
	w := fleetstore.Where{Path: c.Store, DSN: cmp.Or(c.DatabaseURL, g.Getenv(contract.EnvDatabaseURL)),
		StateHome: g.Getenv("XDG_STATE_HOME"), Home: g.Getenv("HOME")}
	if none, err := w.Resolve(&o); none != "" || err != nil {
		return nil, none, exitcode.With(exitcode.Usage, err)
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
	return st, o.Describe(st), nil
}
