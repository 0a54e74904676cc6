package contract

import "testing"

func TestLookups(t *testing.T) {
	t.Parallel()
	m := MapLookup(map[string]string{"A": "1", "EMPTY": ""})
	e := EnvironLookup([]string{"A=0", "B=x=y", "A=1", "EMPTY=", "NOEQUALS"})
	tests := []struct {
		name   string
		lookup Lookup
		key    string
		want   string
		wantOK bool
	}{
		{"map set", m, "A", "1", true},
		{"map empty is set", m, "EMPTY", "", true},
		{"map unset", m, "B", "", false},
		{"environ last wins", e, "A", "1", true},
		{"environ value with =", e, "B", "x=y", true},
		{"environ empty is set", e, "EMPTY", "", true},
		{"environ entry without =", e, "NOEQUALS", "", false},
		{"environ unset", e, "C", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, ok := tt.lookup(tt.key); got != tt.want || ok != tt.wantOK {
				t.Errorf("lookup(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
