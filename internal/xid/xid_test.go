package xid

import "testing"

func TestByProgram(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]bool{13: true, 31: true, 43: true, 45: true, 48: false, 63: false, 79: false, 94: false, 0: false} {
		if got := ByProgram(code); got != want {
			t.Errorf("ByProgram(%d) = %v, want %v", code, got, want)
		}
	}
}
