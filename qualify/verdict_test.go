package qualify

import "testing"

func TestVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		why  []string
		note string
		want string
	}{
		{"pass", nil, "", "pass"},
		{"pass with a note", nil, "alone on its node", "pass (alone on its node)"},
		{"one reason", []string{"quiet CV 3.00 % > 2 %"}, "", "fail: quiet CV 3.00 % > 2 %"},
		{"two reasons and a note", []string{"a", "b"}, "n", "fail: a; b (n)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := verdictOf(tt.why).Text(tt.why, tt.note); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
