package signing

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/buildkite/go-pipeline/jwkutil"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// DefaultAlgorithm is Ed25519: small keys, fast, deterministic signatures.
const DefaultAlgorithm = "EdDSA"

// Algorithms are the asymmetric algorithms the agent accepts for job
// signatures (go-pipeline's jwkutil.ValidSigningAlgorithms). HMAC is left
// out on purpose: with a shared secret every verifying vendor node could
// also sign.
var Algorithms = []string{"EdDSA", "ES512", "PS512"}

// KeyPair is one freshly made key as two JWKS documents.
type KeyPair struct {
	Alg     string // canonical name, e.g. "EdDSA"
	KeyID   string
	Private []byte // JWKS holding the private key: the signer's secret
	Public  []byte // JWKS holding only the public key: safe to hand out
}

// Generate makes a key pair for alg with the given key id (a random one
// when keyID is empty).
func Generate(alg, keyID string) (*KeyPair, error) {
	sa, err := parseAlgorithm(alg)
	if err != nil {
		return nil, err
	}
	if keyID == "" {
		keyID, err = randomKeyID()
		if err != nil {
			return nil, err
		}
	}
	priv, pub, err := jwkutil.NewKeyPair(keyID, sa)
	if err != nil {
		return nil, fmt.Errorf("generating %s key: %w", alg, err)
	}
	privJSON, err := marshalSet(priv)
	if err != nil {
		return nil, err
	}
	pubJSON, err := marshalSet(pub)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Alg: sa.String(), KeyID: keyID, Private: privJSON, Public: pubJSON}, nil
}

func parseAlgorithm(alg string) (jwa.SignatureAlgorithm, error) {
	if alg == "" {
		alg = DefaultAlgorithm
	}
	for _, a := range Algorithms {
		if strings.EqualFold(a, alg) {
			sa, ok := jwa.LookupSignatureAlgorithm(a)
			if !ok {
				return jwa.SignatureAlgorithm{}, fmt.Errorf("algorithm %q unknown to jwx", a)
			}
			return sa, nil
		}
	}
	return jwa.SignatureAlgorithm{}, fmt.Errorf("unsupported algorithm %q (want one of %s; HMAC and RSA-PKCS1 are refused by the agent)", alg, strings.Join(Algorithms, ", "))
}

func randomKeyID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a key id: %w", err)
	}
	return "kbgen-" + hex.EncodeToString(b), nil
}

func marshalSet(s jwk.Set) ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding JWKS: %w", err)
	}
	return append(b, '\n'), nil
}

// KeyChoiceError is a JWKS whose key ParsePrivate cannot pick: no key
// has the id Want, or Want is "" and it holds several (Have, their ids).
type KeyChoiceError struct {
	Want string
	Have []string
}

func (e *KeyChoiceError) Error() string {
	if e.Want != "" {
		return fmt.Sprintf("signing key JWKS has no key with id %q (it has %s)", e.Want, strings.Join(e.Have, ", "))
	}
	return fmt.Sprintf("signing key JWKS holds %d keys; name one with its key id (%s)", len(e.Have), strings.Join(e.Have, ", "))
}

// ParsePrivate picks the signing key out of a private JWKS: the key with
// keyID, or the only key when keyID is empty. It refuses a public key, so a
// mixed-up file fails here rather than at signing time.
func ParsePrivate(data []byte, keyID string) (jwk.Key, error) {
	set, err := jwk.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parsing signing key JWKS: %w", err)
	}
	var key jwk.Key
	switch {
	case keyID != "":
		k, ok := set.LookupKeyID(keyID)
		if !ok {
			return nil, &KeyChoiceError{Want: keyID, Have: KeyIDs(set)}
		}
		key = k
	case set.Len() == 1:
		key, _ = set.Key(0)
	default:
		return nil, &KeyChoiceError{Have: KeyIDs(set)}
	}
	if !isPrivate(key) {
		return nil, errors.New("signing key JWKS holds a public key; sign with the private key file from `kbgen keygen --private-out`")
	}
	if err := jwkutil.Validate(key); err != nil {
		return nil, fmt.Errorf("signing key is not usable for job signatures: %w", err)
	}
	return key, nil
}

// ParsePublic reads a verification JWKS, the file vendor agents get. Every
// key must be a valid public signing key: a private key in this file would
// let every vendor node forge steps, so it is refused.
func ParsePublic(data []byte) (jwk.Set, error) {
	set, err := jwk.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parsing verification JWKS: %w", err)
	}
	if set.Len() == 0 {
		return nil, errors.New("verification JWKS holds no keys")
	}
	for i := range set.Len() {
		k, _ := set.Key(i)
		id, _ := k.KeyID()
		if isPrivate(k) {
			return nil, fmt.Errorf("verification JWKS key %q is a private key; hand out only the file from `kbgen keygen --public-out`", id)
		}
		if err := jwkutil.Validate(k); err != nil {
			return nil, fmt.Errorf("verification JWKS key %q: %w", id, err)
		}
	}
	return set, nil
}

// ParsePrivateSet reads a signing JWKS as a control agent holds it: every
// key private and usable, one or several (several during a rotation, when
// KBGEN_SIGNING_KEY_ID picks one). A public key here would sign nothing.
func ParsePrivateSet(data []byte) (jwk.Set, error) {
	set, err := jwk.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parsing signing key JWKS: %w", err)
	}
	if set.Len() == 0 {
		return nil, errors.New("signing key JWKS holds no keys")
	}
	for i := range set.Len() {
		k, _ := set.Key(i)
		id, _ := k.KeyID()
		if !isPrivate(k) {
			return nil, fmt.Errorf("signing key JWKS key %q is a public key; the control agents hold the file from `kbgen keygen --private-out`", id)
		}
		if err := jwkutil.Validate(k); err != nil {
			return nil, fmt.Errorf("signing key JWKS key %q: %w", id, err)
		}
	}
	return set, nil
}

// LoadPrivate reads ParsePrivate's input from a file.
func LoadPrivate(path, keyID string) (jwk.Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading signing key: %w", err)
	}
	k, err := ParsePrivate(data, keyID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadPublic reads ParsePublic's input from a file.
func LoadPublic(path string) (jwk.Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading verification keys: %w", err)
	}
	s, err := ParsePublic(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// KeyIDs lists the key ids of a set, sorted.
func KeyIDs(s jwk.Set) []string {
	ids := make([]string, 0, s.Len())
	for i := range s.Len() {
		k, _ := s.Key(i)
		id, _ := k.KeyID()
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// isPrivate reports whether k carries private material. Symmetric keys
// count as private: their one value both signs and verifies.
func isPrivate(k jwk.Key) bool {
	switch k.(type) {
	case jwk.OKPPrivateKey, jwk.ECDSAPrivateKey, jwk.RSAPrivateKey, jwk.SymmetricKey:
		return true
	}
	return false
}

// WriteKeyFile writes a key file with mode perm. Without overwrite it fails
// if path exists (O_EXCL, so a racing writer cannot slip in between the
// check and the write); with overwrite it replaces path atomically, so a
// reader never sees half a key and the old file's looser mode is not kept.
func WriteKeyFile(path string, data []byte, perm os.FileMode, overwrite bool) error {
	if !overwrite {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s exists; pass --force to replace it", path)
			}
			return fmt.Errorf("writing key: %w", err)
		}
		return finish(f, data, perm)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".kbgen-key-*")
	if err != nil {
		return fmt.Errorf("writing key: %w", err)
	}
	if err := finish(f, data, perm); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing key: %w", err)
	}
	return nil
}

// finish writes data, forces perm (the umask may have loosened or
// tightened it) and closes f.
func finish(f *os.File, data []byte, perm os.FileMode) error {
	_, werr := f.Write(data)
	cerr := f.Chmod(perm)
	if err := f.Close(); werr == nil && cerr == nil {
		werr = err
	}
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("writing key %s: %w", f.Name(), werr)
	}
	return nil
}
