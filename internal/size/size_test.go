package size

import (
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     Bytes
	}{
		{"bytes", "1024", 1024},
		{"bytes suffix", "100b", 100},
		{"mebibytes", "512m", 512 * MiB},
		{"gibibytes", "64g", 64 * GiB},
		{"upper case", "64G", 64 * GiB},
		{"gb", "64gb", 64 * GiB},
		{"GiB", "64GiB", 64 * GiB},
		{"space before unit", "64 g", 64 * GiB},
		// The registry refused this while the sandbox took it (issue 16).
		{"fraction", "1.5g", 1536 * MiB},
		{"fraction truncated as docker does", "1.0000001k", 1024},
		{"leading zero", "016g", 16 * GiB},
		{"tebibytes", "2t", 2 * TiB},
		{"pebibytes", "1p", PiB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("Parse(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"unit only", "g"},
		{"negative", "-1g"},
		{"zero, docker's no limit", "0"},
		{"zero with unit", "0g"},
		{"less than a byte", "0.5"},
		{"unknown unit", "12x"},
		{"i without b", "5i"},
		{"ib without unit", "5ib"},
		{"b then more", "5bb"},
		{"too long a suffix", "5gibb"},
		{"exponent", "1e3"},
		{"leading point", ".5g"},
		{"trailing point", "1.g"},
		{"two points", "1.2.3g"},
		{"leading space", " 64g"},
		{"trailing space", "64g "},
		{"space, no unit", "64 "},
		{"two spaces", "64  g"},
		{"too large", "99999999p"},
		{"exactly 2^63", "8192p"},
		{"hex", "0x10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, err := Parse(tt.in); err == nil {
				t.Errorf("Parse(%q) = %d, want an error", tt.in, got)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		in         Bytes
		docker, k8 string
	}{
		{"whole gibibytes", 64 * GiB, "64g", "64Gi"},
		{"one and a half gibibytes", 1536 * MiB, "1536m", "1536Mi"},
		{"1024 gibibytes", 1024 * GiB, "1t", "1Ti"},
		{"not a multiple of 1024", 1000, "1000", "1000"},
		{"kibibytes", 4 * KiB, "4k", "4Ki"},
		{"one byte over", 64*GiB + 1, "68719476737", "68719476737"},
		{"pebibytes", 3 * PiB, "3p", "3Pi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.in.String(); got != tt.docker {
				t.Errorf("String() = %q, want %q", got, tt.docker)
			}
			if got := tt.in.KubernetesQuantity(); got != tt.k8 {
				t.Errorf("KubernetesQuantity() = %q, want %q", got, tt.k8)
			}
			if n, err := Parse(tt.in.String()); err != nil || n != tt.in {
				t.Errorf("Parse(%q) = %d, %v; want %d", tt.in.String(), n, err, tt.in)
			}
		})
	}
}

// FuzzParse: whatever parses is positive and survives String and Parse
// unchanged, so a size written by one part reads the same in another.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"64g", "1.5g", "512MiB", "100b", "1 t", "8191p", "0.5", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Parse(s)
		if err != nil {
			return
		}
		if b < 1 {
			t.Fatalf("Parse(%q) = %d, not positive", s, b)
		}
		if again, err := Parse(b.String()); err != nil || again != b {
			t.Fatalf("Parse(%q) = %d, but Parse(%q) = %d, %v", s, b, b.String(), again, err)
		}
	})
}
