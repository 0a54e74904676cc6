package lazyre

import (
	"slices"
	"testing"
)

// TestForwards: each forwarded method answers as the compiled pattern's.
func TestForwards(t *testing.T) {
	t.Parallel()
	re := New(`^(\d+)([a-z]?)$`)
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"MatchString match", re.MatchString("64g"), true},
		{"MatchString no match", re.MatchString("1.5g"), false},
		{"FindStringSubmatch", re.FindStringSubmatch("64g"), []string{"64g", "64", "g"}},
		{"FindSubmatch", len(re.FindSubmatch([]byte("7"))), 3},
		{"ReplaceAllString", re.ReplaceAllString("12k", "$1"), "12"},
		{"Regexp", re.Regexp().String(), `^(\d+)([a-z]?)$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			switch want := tt.want.(type) {
			case []string:
				if !slices.Equal(tt.got.([]string), want) {
					t.Errorf("got %q, want %q", tt.got, want)
				}
			default:
				if tt.got != want {
					t.Errorf("got %v, want %v", tt.got, want)
				}
			}
		})
	}
}

// TestNotCompiledUntilUsed: a bad pattern only panics when first used,
// which is the point (and why each package's tests must match each of its
// patterns).
func TestNotCompiledUntilUsed(t *testing.T) {
	t.Parallel()
	re := New(`(`) // no panic here
	defer func() {
		if recover() == nil {
			t.Error("a bad pattern did not panic when first used")
		}
	}()
	re.MatchString("x")
}
