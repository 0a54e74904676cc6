package nvsmi

import (
	"os"
	"testing"
)

// TestParseMIG reads the MIG fixture of node's 8×H100 (`nvidia-smi -L` of
// GPUs split into instances): each instance under its GPU's index, with
// its profile and its GPU's UUID as Parent; an instance before any GPU
// line is an error.
func TestParseMIG(t *testing.T) {
	t.Parallel()
	out, err := os.ReadFile("../../node/testdata/h100x8/nvidia-smi-mig.txt")
	if err != nil {
		t.Fatal(err)
	}
	migs, err := ParseMIG(out)
	if err != nil {
		t.Fatal(err)
	}
	first := migs[0]
	if len(first) == 0 {
		t.Fatalf("GPU 0 has no MIG instances: %v", migs)
	}
	want := MIGInstance{Profile: "1g.10gb", UUID: "MIG-0e6c0000-5d4b-5a3c-9b2a-1f0e9d8c7b60", Parent: "GPU-5a1c0000-4c1e-2f6a-9d0b-e3f1a2b40000"}
	if first[0] != want {
		t.Errorf("GPU 0's first instance = %+v, want %+v", first[0], want)
	}
	if _, err := ParseMIG([]byte("  MIG 1g.10gb     Device  0: (UUID: MIG-0e6c0000-5d4b-5a3c-9b2a-1f0e9d8c7b60)\n")); err == nil {
		t.Error("an instance before any GPU line was accepted")
	}
}
