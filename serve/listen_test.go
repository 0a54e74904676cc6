package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/testcert"
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
		{"every interface", "0.0.0.0:8077", "t", "not a loopback address; kbgen serve runs beside the backend (to reach it from another host, give it --tls-cert and --tls-key"},
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
			// The message is the contract: the operator reads which flag to fix and how.
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

// TestParseListenTLS: with --tls-cert and --tls-key the service may listen
// on any TCP address, the token still required; a pair that does not load
// is exit 2 at once.
func TestParseListenTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pair := testcert.Write(t, dir, "serve", "127.0.0.1")
	other := testcert.Write(t, dir, "other", "127.0.0.1")
	for _, tc := range []struct {
		name, listen, token, cert, key string
		wantErr                        string // "": accepted
	}{
		{"every interface with TLS", "0.0.0.0:0", "t", pair.Cert, pair.Key, ""},
		{"loopback with TLS", "127.0.0.1:0", "t", pair.Cert, pair.Key, ""},
		{"TLS without a token", "0.0.0.0:0", "", pair.Cert, pair.Key, "KBGEN_SERVER_TOKEN is required"},
		{"a certificate without its key", "0.0.0.0:0", "t", pair.Cert, "", "go together"},
		{"a key that is not the certificate's", "0.0.0.0:0", "t", pair.Cert, other.Key, "private key does not match public key"},
		{"TLS on a socket", "unix:/tmp/kbgen.sock", "", pair.Cert, pair.Key, "for a TCP --listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := ParseListenTLS(tc.listen, tc.token, tc.cert, tc.key)
			if tc.wantErr == "" {
				if err != nil || e.tls == nil {
					t.Fatalf("refused: %v (TLS %v)", err, e.tls != nil)
				}
				return
			}
			// The message is the contract: the operator reads which flag to fix and how.
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || exitcode.Of(err) != exitcode.Usage {
				t.Fatalf("err %v (exit %d), want exit 2 saying %q", err, exitcode.Of(err), tc.wantErr)
			}
		})
	}
}
