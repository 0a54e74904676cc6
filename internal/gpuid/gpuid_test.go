package gpuid

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
)

func TestGrammar(t *testing.T) {
	t.Parallel()
	const gpu = "GPU-5a1c0000-4c1e-2f6a-9d0b-e3f1a2b40000"
	const mig = "MIG-0e6c0000-5d4b-5a3c-9b2a-1f0e9d8c7b60"
	tests := []struct {
		name  string
		check func(string) error
		in    string
		want  string // "" accepted, else a piece of the error
	}{
		{"gpu", NVIDIAGPU, gpu, ""},
		{"gpu without its prefix", NVIDIAGPU, gpu[4:], "want GPU-"},
		{"gpu upper-case hex", NVIDIAGPU, "GPU-" + strings.ToUpper(gpu[4:]), ""},
		{"gpu prefix only", NVIDIAGPU, "GPU-", "want GPU-"},
		{"gpu with a sudoers line", NVIDIAGPU, gpu + "\nDefaults !authenticate\n#", `"GPU-5a1c0000-4c1e-2f6a-9d0b-e3f1a2b40000\nDefaults !authenticate\n#"`},
		{"gpu with a trailing space", NVIDIAGPU, gpu + " ", "want GPU-"},
		{"gpu short group", NVIDIAGPU, "GPU-5a1c000-4c1e-2f6a-9d0b-e3f1a2b40000", "want GPU-"},
		{"gpu is not mig", NVIDIAGPU, mig, "want GPU-"},
		{"mig", NVIDIAMIG, mig, ""},
		{"mig legacy", NVIDIAMIG, "MIG-" + gpu + "/1/0", "pre-R470"},
		{"mig with a comment", NVIDIAMIG, mig + "#", "want MIG-"},
		{"either gpu", NVIDIA, gpu, ""},
		{"either mig", NVIDIA, mig, ""},
		{"either bad mig", NVIDIA, "MIG-1", "MIG uuid"},
		{"amd kfd", AMD, "GPU-18f68e602b8a790f", ""},
		{"amd short", AMD, "GPU-1", ""},
		{"amd too long", AMD, "GPU-18f68e602b8a790f0", "AMD GPU unique id"},
		{"amd n/a", AMD, "GPU-n/a", "AMD GPU unique id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.check(tc.in)
			var ge *Error
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%q refused: %v", tc.in, err)
			case tc.want != "" && (!errors.As(err, &ge) || ge.Value != tc.in || exitcode.Of(err) != exitcode.Usage):
				t.Errorf("%q: error %v, want a gpuid.Error of it (exit 2)", tc.in, err)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				// The text is what the operator reads: it says what is wanted.
				t.Errorf("%q: error %v, want one saying %s", tc.in, err, tc.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				// The text is the contract: a quoted value must not forge a log line.
				t.Errorf("error text has a raw newline: %q", err.Error())
			}
		})
	}
}
