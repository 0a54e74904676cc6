package cpulist

import (
	"slices"
	"testing"
	"testing/fstest"
)

// smtSysfs is a sysfs whose cores are the given sibling lists.
func smtSysfs(cores ...string) fstest.MapFS {
	sys := fstest.MapFS{}
	for _, core := range cores {
		cpus, _ := Parse(core)
		for _, c := range cpus {
			sys["devices/system/cpu/cpu"+Format([]int{c})+"/topology/thread_siblings_list"] = &fstest.MapFile{Data: []byte(core + "\n")}
		}
	}
	return sys
}

func TestCores(t *testing.T) {
	t.Parallel()
	pairs := smtSysfs("0,8", "1,9", "2,10", "3,11", "4,12", "5,13", "6,14", "7,15")
	tests := []struct {
		name string
		sys  fstest.MapFS
		set  string
		want []string
	}{
		{"whole cores", pairs, "2-5,10-13", []string{"2,10", "3,11", "4,12", "5,13"}},
		// CPU 3's sibling 11 is not in the set: 3 stays a core of its own.
		{"half-owned core", pairs, "3-5,12-13", []string{"3", "4,12", "5,13"}},
		{"no topology: each CPU its own core", fstest.MapFS{}, "0-2", []string{"0", "1", "2"}},
		{"four-way SMT", smtSysfs("0-3", "4-7"), "0-7", []string{"0-3", "4-7"}},
		{"siblings listed out of order", smtSysfs("9,1"), "1,9", []string{"1,9"}},
		{"empty set", pairs, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set, _ := Parse(tt.set)
			cores, err := set.Cores(tt.sys)
			var got []string
			for _, c := range cores {
				got = append(got, c.String())
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("Cores(%s) = %v, %v; want %v", tt.set, got, err, tt.want)
			}
		})
	}
}

func TestCoresUnreadableSiblings(t *testing.T) {
	t.Parallel()
	sys := fstest.MapFS{"devices/system/cpu/cpu0/topology/thread_siblings_list": &fstest.MapFile{Data: []byte("zero\n")}}
	if cores, err := (Set{0, 1}).Cores(sys); err == nil {
		t.Errorf("Cores with a bad siblings list = %v, want an error", cores)
	}
}
