package noisepolicy

import (
	"strings"
	"testing"
)

func TestPolicyRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Policy
		err  string
	}{
		{in: "", want: Policy{MaxStealPercent: 5, MaxForeignPercent: 1}},
		{in: "max_steal_percent=2.5,retry=true", want: Policy{MaxStealPercent: 2.5, MaxForeignPercent: 1, Retry: true}},
		{in: "max_foreign_percent=3", want: Policy{MaxStealPercent: 5, MaxForeignPercent: 3}},
		{in: "max_steal_percent=101", err: "between 0 and 100"},
		{in: "retry=maybe", err: "retry"},
		{in: "steal=5", err: `unknown key "steal"`},
		{in: "retry", err: "not key=value"},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		back, err := Parse(got.String())
		if err != nil || back != got {
			t.Errorf("Parse(%q) = %+v, %v; want %+v back", got.String(), back, err, got)
		}
	}
}
