package payload

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

func TestSplitJoinEnv(t *testing.T) {
	t.Parallel()
	for _, size := range []int{10, MaxEnvValue, MaxEnvValue + 1, 3*MaxEnvValue + 7} {
		enc := strings.Repeat("A", size)
		env := SplitEnv(enc)
		for k, v := range env {
			if len(k)+1+len(v)+1 > 131072 {
				t.Errorf("size %d: %s is %d bytes, over MAX_ARG_STRLEN", size, k, len(v))
			}
			if !IsPayloadEnvKey(k) {
				t.Errorf("%s not recognised as a payload key", k)
			}
		}
		_, single := env[contract.EnvPayload]
		if single != (size <= MaxEnvValue) {
			t.Errorf("size %d: single=%v", size, single)
		}
		got, err := JoinEnv(contract.MapLookup(env))
		if err != nil || got != enc {
			t.Fatalf("size %d: join failed: %v", size, err)
		}
	}
}

func TestJoinEnvDetectsTampering(t *testing.T) {
	t.Parallel()
	env := SplitEnv(strings.Repeat("B", 2*MaxEnvValue+5))
	delete(env, contract.EnvPayload+"_2")
	_, err := JoinEnv(contract.MapLookup(env))
	var je *Error
	if !errors.As(err, &je) || je.Kind != KindChecksum {
		t.Fatalf("want checksum error, got %v", err)
	}
	_, err = JoinEnv(func(string) (string, bool) { return "", false })
	if !errors.As(err, &je) || je.Kind != KindNoPayload {
		t.Fatalf("want no-payload, got %v", err)
	}
}

func TestIsPayloadEnvKey(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]bool{
		"KERNELBOT_PAYLOAD": true, "KERNELBOT_PAYLOAD_0": true, "KERNELBOT_PAYLOAD_12": true,
		"KERNELBOT_PAYLOAD_SHA256": true, "KERNELBOT_PAYLOAD_X": false, "KERNELBOT_RUN_ID": false, "PATH": false,
	} {
		if IsPayloadEnvKey(k) != want {
			t.Errorf("%s: want %v", k, want)
		}
	}
}
