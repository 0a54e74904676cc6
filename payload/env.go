package payload

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// MaxEnvValue is the largest payload piece put in one env var. Linux refuses
// any single "NAME=value" string of MAX_ARG_STRLEN (131072) bytes or more;
// the margin leaves room for the name, '=' and the NUL.
const MaxEnvValue = 131072 - 64

// SplitEnv returns the build env entries that carry an encoded payload:
// KERNELBOT_PAYLOAD when it fits one string, else KERNELBOT_PAYLOAD_0..N-1;
// always KERNELBOT_PAYLOAD_SHA256 so the reader can check reassembly.
func SplitEnv(encoded string) map[string]string {
	env := map[string]string{contract.EnvPayloadSHA256: Checksum(encoded)}
	if len(encoded) <= MaxEnvValue {
		env[contract.EnvPayload] = encoded
		return env
	}
	for i := 0; len(encoded) > 0; i++ {
		n := min(MaxEnvValue, len(encoded))
		env[chunkKey(i)] = encoded[:n]
		encoded = encoded[n:]
	}
	return env
}

// JoinEnv reassembles the encoded payload from an env lookup function (such
// as os.LookupEnv). It returns KindNoPayload when neither form is present and
// KindChecksum when the pieces do not match KERNELBOT_PAYLOAD_SHA256.
func JoinEnv(lookup contract.Lookup) (string, error) {
	encoded, ok := lookup(contract.EnvPayload)
	if !ok || encoded == "" {
		encoded = ""
		for i := 0; ; i++ {
			part, ok := lookup(chunkKey(i))
			if !ok {
				break
			}
			encoded += part
		}
	}
	if encoded == "" {
		return "", errorf(KindNoPayload, "", "no %s or %s_0.. in the environment", contract.EnvPayload, contract.EnvPayload)
	}
	if want, ok := lookup(contract.EnvPayloadSHA256); ok && want != "" && want != Checksum(encoded) {
		return "", errorf(KindChecksum, contract.EnvPayloadSHA256, "the reassembled payload does not match its checksum (a piece is missing or altered)")
	}
	return encoded, nil
}

// Checksum is the hex SHA-256 of the encoded payload text.
func Checksum(encoded string) string {
	sum := sha256.Sum256([]byte(encoded))
	return hex.EncodeToString(sum[:])
}

// IsPayloadEnvKey reports whether key is one of the env vars that carry
// the payload, so callers can strip them from a child's environment.
func IsPayloadEnvKey(key string) bool {
	if key == contract.EnvPayload || key == contract.EnvPayloadSHA256 {
		return true
	}
	prefix := contract.EnvPayload + "_"
	if len(key) <= len(prefix) || key[:len(prefix)] != prefix {
		return false
	}
	_, err := strconv.Atoi(key[len(prefix):])
	return err == nil
}

func chunkKey(i int) string { return fmt.Sprintf("%s_%d", contract.EnvPayload, i) }
