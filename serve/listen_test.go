package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
)

func TestParseListen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, listen, token string
		wantErr             string // "": accepted
	}{
		{"loopback with a token", "127.0.0.1:0", "t", ""},
		{"localhost with a token", "localhost:8077", "t", ""},
		{"IPv6 loopback", "[::1]:0", "t", ""},
		{"a socket needs no token", "unix:/tmp/kbgen.sock", "", ""},
		{"TCP without a token", "127.0.0.1:0", "", "KBGEN_SERVER_TOKEN is required"},
		{"every interface", "0.0.0.0:8077", "t", "not a loopback address"},
		{"a public name", "example.com:8077", "t", "not a loopback address"},
		{"no port", "127.0.0.1", "t", "want 127.0.0.1:PORT or unix:/path"},
		{"a socket without a path", "unix:", "", "needs a path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseListen(tc.listen, tc.token)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || exitcode.Of(err) != exitcode.Usage {
				t.Fatalf("err %v (exit %d), want exit 2 saying %q", err, exitcode.Of(err), tc.wantErr)
			}
		})
	}
}

// A socket is its owner's alone, and one left by a killed service is
// replaced.
func TestListenUnixSocket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "serve.sock")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	e, err := ParseListen("unix:"+path, "")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := e.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, err := os.Stat(path)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v (%v), want a socket, mode 0600", st.Mode(), err)
	}
	if got := e.where(ln); got != "unix:"+path {
		t.Errorf("where %q", got)
	}
}
