package store

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// A real PostgreSQL for the package's tests: initdb and pg_ctl from PATH
// or Debian's /usr/lib/postgresql/*/bin, started once, as the postgres
// user when the tests run as root (initdb refuses root), on a loopback
// port, stopped by TestMain.
var pg struct {
	once sync.Once
	dir  string
	dsn  string
	err  error
	as   []string // runuser prefix, when root
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pg.dir != "" {
		_ = pgCmd("pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(pg.dir)
	}
	os.Exit(code)
}

func pgBin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name); len(m) > 0 {
		return m[len(m)-1]
	}
	return ""
}

func pgCmd(name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, pg.as...), pgBin(name)), args...)
	return exec.Command(argv[0], argv[1:]...)
}

// postgresDSN is a fresh database on the shared server; the test skips,
// saying so, only where PostgreSQL is not installed.
func postgresDSN(t *testing.T) string {
	t.Helper()
	if pgBin("initdb") == "" || pgBin("pg_ctl") == "" {
		t.Skip("SKIP: PostgreSQL (initdb, pg_ctl) is not installed")
	}
	pg.once.Do(startPostgres)
	if pg.err != nil {
		t.Fatalf("starting PostgreSQL: %v", pg.err)
	}
	db := fmt.Sprintf("t%d", time.Now().UnixNano())
	if out, err := pgCmd("psql", "-h", "127.0.0.1", "-p", pgPort(), "-U", "kbgen", "-d", "postgres", "-c", "CREATE DATABASE "+db).CombinedOutput(); err != nil {
		t.Fatalf("createdb: %v\n%s", err, out)
	}
	return fmt.Sprintf("postgres://kbgen:secret-pw@127.0.0.1:%s/%s?sslmode=disable", pgPort(), db)
}

var pgPortNum int

func pgPort() string { return strconv.Itoa(pgPortNum) }

func startPostgres() {
	if u, err := user.Current(); err == nil && u.Uid == "0" {
		pg.as = []string{"runuser", "-u", "postgres", "--"}
	}
	dir, err := os.MkdirTemp("", "kbgen-pg-")
	if err != nil {
		pg.err = err
		return
	}
	pg.dir = dir
	if err := os.Chmod(dir, 0o777); err != nil {
		pg.err = err
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pg.err = err
		return
	}
	pgPortNum = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("secret-pw\n"), 0o644); err != nil {
		pg.err = err
		return
	}
	data := filepath.Join(dir, "data")
	if out, err := pgCmd("initdb", "-D", data, "-U", "kbgen", "--pwfile", pw, "-A", "scram-sha-256", "--no-sync").CombinedOutput(); err != nil {
		pg.err = fmt.Errorf("initdb: %v\n%s", err, out)
		return
	}
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c fsync=off", pgPortNum, dir)
	if out, err := pgCmd("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		pg.err = fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
		return
	}
	os.Setenv("PGPASSWORD", "secret-pw")
}

// backends are the two databases every store test runs against.
func backends(t *testing.T) map[string]func(t *testing.T, service string) Options {
	t.Helper()
	return map[string]func(*testing.T, string) Options{
		"sqlite": func(t *testing.T, service string) Options {
			return Options{Path: filepath.Join(t.TempDir(), "s.db"), Service: service}
		},
		"postgres": func(t *testing.T, service string) Options {
			return Options{DSN: postgresDSN(t), Service: service}
		},
	}
}

func open(t *testing.T, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
