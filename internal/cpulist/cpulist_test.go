package cpulist

import (
	"slices"
	"testing"
)

func TestParseFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []int
		out  string
	}{
		{"", nil, ""},
		{"0", []int{0}, "0"},
		{"0-3,8,10-11", []int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"},
		{"5,1-2,2,5", []int{1, 2, 5}, "1-2,5"},
		{" 2-15,98-99\n", append(seq(2, 15), 98, 99), "2-15,98-99"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if f := Format(got); f != tt.out {
			t.Errorf("Format(%v) = %q, want %q", got, f, tt.out)
		}
	}
	for _, bad := range []string{"a", "3-1", "1,,2", "-1", "0-999999999", "1-", "1-2-3"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, got)
		}
	}
}

func seq(a, b int) []int {
	var s []int
	for i := a; i <= b; i++ {
		s = append(s, i)
	}
	return s
}
