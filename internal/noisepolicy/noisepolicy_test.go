package noisepolicy

import (
	"errors"
	"strings"
	"testing"
)

func TestPolicyRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Policy
		key  string // the setting an error names
		err  string
	}{
		{in: "", want: Policy{MaxStealPercent: 5, MaxForeignPercent: 1}},
		{in: "max_steal_percent=2.5,retry=true", want: Policy{MaxStealPercent: 2.5, MaxForeignPercent: 1, Retry: true}},
		{in: "max_foreign_percent=3", want: Policy{MaxStealPercent: 5, MaxForeignPercent: 3}},
		{in: "max_steal_percent=101", key: "max_steal_percent", err: "between 0 and 100"},
		{in: "retry=maybe", key: "retry", err: `retry: strconv.ParseBool: parsing "maybe"`},
		{in: "steal=5", key: "steal", err: `unknown key "steal"`},
		{in: "retry", key: "retry", err: `"retry" is not key=value`},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			var pe *Error
			if !errors.As(err, &pe) || pe.Key != tc.key {
				t.Errorf("Parse(%q) error = %v, want an Error of %q", tc.in, err, tc.key)
			}
			// The message is the contract: it tells the registry's author what is wrong with the key.
			if err != nil && !strings.Contains(err.Error(), tc.err) {
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
