package bkagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// standIn returns an environment whose PATH finds testdata/buildkite-agent,
// a stand-in that records each call's argv, cwd and stdin under BK_LOG_DIR
// and fails the subcommand named by BK_FAIL.
func standIn(t *testing.T, extra ...string) []string {
	t.Helper()
	bin, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"PATH=" + bin + ":/usr/bin:/bin"}, extra...)
}

func TestAgentCalls(t *testing.T) {
	logDir := t.TempDir()
	agent, err := Find("", standIn(t, "BK_LOG_DIR="+logDir))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx := context.Background()
	if err := agent.ArtifactUpload(ctx, out, []string{"result.json", "profile_data/profile.0.zip"}); err != nil {
		t.Fatal(err)
	}
	if err := agent.Annotate(ctx, "**hello** | table", "success", "kbgen-result"); err != nil {
		t.Fatal(err)
	}
	if err := agent.PipelineUpload(ctx, []byte("steps: []\n")); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string { b, _ := os.ReadFile(filepath.Join(logDir, name)); return string(b) }
	for _, c := range []struct{ file, want string }{
		{"0.argv", "artifact\nupload\n--debug\n--no-color\n--debug-http=false\nresult.json;profile_data/profile.0.zip\n"},
		{"0.cwd", out + "\n"},
		{"1.argv", "annotate\n--style\nsuccess\n--context\nkbgen-result\n"},
		{"1.stdin", "**hello** | table"},
		{"2.argv", "pipeline\nupload\n"},
		{"2.stdin", "steps: []\n"},
	} {
		if got := read(c.file); got != c.want {
			t.Errorf("%s = %q, want %q", c.file, got, c.want)
		}
	}
}

func TestAgentFailureCarriesItsOutput(t *testing.T) {
	agent, err := Find("", standIn(t, "BK_LOG_DIR="+t.TempDir(), "BK_FAIL=artifact"))
	if err != nil {
		t.Fatal(err)
	}
	err = agent.ArtifactUpload(context.Background(), t.TempDir(), []string{"result.json"})
	var ce *CallError
	if !errors.As(err, &ce) || ce.Call != "buildkite-agent artifact upload" || ce.Exit != 1 || ce.Output != "fatal: failed to upload (stand-in)" {
		t.Fatalf("err %v, want the upload's exit 1 and its output", err)
	}
	// The message is the contract: the job log shows what the agent said.
	if want := "buildkite-agent artifact upload failed (exit 1): fatal: failed to upload (stand-in)"; err.Error() != want {
		t.Errorf("err %q, want %q", err, want)
	}
}

func TestFindOnlyOnTheGivenPath(t *testing.T) {
	_, err := Find("", []string{"PATH=" + t.TempDir()})
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Name != "buildkite-agent" {
		t.Errorf("empty PATH: %v", err)
	}
	if _, err := Find("no-such-agent-xyz", standIn(t)); err == nil {
		t.Error("found an agent that does not exist")
	}
	abs, _ := filepath.Abs("testdata/buildkite-agent")
	if a, err := Find(abs, nil); err != nil || a.Path != abs {
		t.Errorf("absolute name: %v %v", a, err)
	}
}

func TestSummaryKeepsBothEnds(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"one line\n", "one line"},
		{"a\nb\nc", "a | b | c"},
		{"1\n2\n3\n4\n5\n6\n7", "1 | 2 | 3 | 4 | 5 | 6 | 7"},
		{"found result.json\nuploading\n3\n4\n5\npanic: x\ngoroutine 1\nmain.go:1", "found result.json | uploading | … | 5 | panic: x | goroutine 1 | main.go:1"},
	} {
		if got := summary(tt.in); got != tt.want {
			t.Errorf("summary(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestArtifactUploadRefusesPatterns: names the container chose (a profile
// zip it planted in profile_data/) cannot add a pattern to the agent's
// ";"-joined glob list: only the safe names reach the agent, and the
// error names the others.
func TestArtifactUploadRefusesPatterns(t *testing.T) {
	t.Parallel()
	logDir := t.TempDir()
	agent, err := Find("", standIn(t, "BK_LOG_DIR="+logDir))
	if err != nil {
		t.Fatal(err)
	}
	hostile := []string{"profile_data/a;*;.zip", "profile_data/*.zip", "profile_data/**", "profile_data/{a,b}.zip", "profile_data/[ab].zip",
		"profile_data/x?.zip", "../../etc/passwd", "/etc/shadow", "profile_data/a\nb.zip", "profile_data/a b.zip", "profile_data/\\*.zip", "", "./result.json", "profile_data//x.zip"}
	err = agent.ArtifactUpload(context.Background(), t.TempDir(), append([]string{"result.json", "profile_data/profile.0.zip"}, hostile...))
	if ue := (*UnsafeNamesError)(nil); !errors.As(err, &ue) || !slices.Equal(ue.Names, hostile) {
		t.Errorf("error = %v, want the %d refused names", err, len(hostile))
	}
	argv, _ := os.ReadFile(filepath.Join(logDir, "0.argv"))
	if string(argv) != "artifact\nupload\n--debug\n--no-color\n--debug-http=false\nresult.json;profile_data/profile.0.zip\n" {
		t.Errorf("agent argv = %q", argv)
	}
}

func TestSafeArtifactPath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    string
		want bool
	}{
		{"result.json", true}, {"profile_data/profile.10.zip", true}, {"noise.json", true}, {"a-b_c.D9", true},
		{"a;b", false}, {"*", false}, {"..", false}, {"a/../b", false}, {"/abs", false}, {"a\x00b", false}, {"é.zip", false}, {"", false},
	} {
		t.Run(tt.p, func(t *testing.T) {
			t.Parallel()
			if got := SafeArtifactPath(tt.p); got != tt.want {
				t.Errorf("SafeArtifactPath(%q) = %v", tt.p, got)
			}
		})
	}
}

// TestMetaDataExists: set, not set (the agent's exit 100), and a failing
// agent, which is an error rather than "not set".
func TestMetaDataExists(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		env       []string
		want      bool
		wantErr   bool
	}{
		{"set", "kbgen_uploaded", []string{"BK_META_SET=kbgen_uploaded"}, true, false},
		{"not set", "kbgen_uploaded", []string{"BK_META_SET=other"}, false, false},
		{"agent fails", "kbgen_uploaded", []string{"BK_FAIL=meta-data"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent, err := Find("", standIn(t, append(tc.env, "BK_LOG_DIR="+t.TempDir())...))
			if err != nil {
				t.Fatal(err)
			}
			got, err := agent.MetaDataExists(context.Background(), tc.key)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("MetaDataExists = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
