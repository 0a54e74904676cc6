// Package dashboardtest (tests only) renders a dashboard page the way a
// browser does, for the dashboard's own tests and serve's: the DOM a
// headless Chromium builds from it.
package dashboardtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// ChromiumDOM is the DOM a headless Chromium builds from html, saved as a
// file; the test skips, saying so, where no Chromium is installed.
func ChromiumDOM(t testing.TB, html []byte) string {
	t.Helper()
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("SKIP: no chromium installed (Debian: chromium)")
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "dashboard.html")
	if err := os.WriteFile(page, html, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir="+filepath.Join(dir, "profile"), "--dump-dom", "file://"+page)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errOut.String())
	}
	return out.String()
}
