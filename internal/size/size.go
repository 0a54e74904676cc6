// Package size is the one memory size kbgen reads and writes: the
// registry's resources, the gpu-docker plugin config, the placement env
// (KERNELBOT_MEMORY, KERNELBOT_SHM_MAX), node plans, the sandbox's docker
// flags and the Kubernetes pod spec all speak it, so a size one of them
// accepts the others accept and read as the same number of bytes.
//
// The grammar is a strict subset of what docker's --memory and --shm-size
// take (github.com/docker/go-units RAMInBytes): a decimal number ("64",
// "1.5"), an optional single space, and an optional binary unit k, m, g,
// t or p (any case, 1k = 1024) followed by nothing, "b" or "ib"; a bare
// "b" means bytes. As docker does, the number is read as a float and the
// bytes truncated ("1.5g" is 1610612736). Left out on purpose, though
// docker takes them: exponents ("1e3"), a number without a leading or
// trailing digit (".5g", "1.g"), a trailing space, and zero (docker's
// "no limit", never what a vendor means by a limit).
package size

import (
	"fmt"
	"strconv"
	"strings"
)

// Binary units, as docker reads "k", "m", "g", "t" and "p". Untyped, so a
// plan's int64 arithmetic and Bytes both use them.
const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
	TiB = 1 << 40
	PiB = 1 << 50
)

// Bytes is a positive memory size.
type Bytes int64

// units, largest first: the docker suffix and the Kubernetes one.
var units = []struct {
	docker, kubernetes string
	shift              uint
}{{"p", "Pi", 50}, {"t", "Ti", 40}, {"g", "Gi", 30}, {"m", "Mi", 20}, {"k", "Ki", 10}}

// Parse reads a size in the grammar above ("200g", "512MiB", "1.5g",
// "1073741824").
func Parse(s string) (Bytes, error) {
	num, unit := split(s)
	shift, ok := unitShift(unit)
	if !ok || !decimal(num) {
		return 0, fmt.Errorf("%q is not a size (want docker syntax such as 512m, 1.5g or 64GiB)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	v := f * float64(uint64(1)<<shift)
	if v >= 1<<63 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if v < 1 {
		return 0, fmt.Errorf("%q is not a positive size", s)
	}
	return Bytes(v), nil
}

// split cuts s after its number and one optional space before a unit.
func split(s string) (num, unit string) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		return s, ""
	}
	num, unit = s[:i], s[i:]
	if rest, ok := strings.CutPrefix(unit, " "); ok && rest != "" {
		unit = rest
	}
	return num, unit
}

// decimal is digits, optionally a point and more digits.
func decimal(s string) bool {
	whole, frac, hasPoint := strings.Cut(s, ".")
	return digits(whole) && (!hasPoint || digits(frac))
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// unitShift is the power of two a unit multiplies by: "", "b", or k, m,
// g, t, p with nothing, "b" or "ib" after it.
func unitShift(unit string) (uint, bool) {
	unit = strings.ToLower(unit)
	if unit == "" || unit == "b" {
		return 0, true
	}
	for _, u := range units {
		if rest, ok := strings.CutPrefix(unit, u.docker); ok && (rest == "" || rest == "b" || rest == "ib") {
			return u.shift, true
		}
	}
	return 0, false
}

// String writes b in docker syntax, in the largest unit that keeps it
// whole, so argv and plans stay readable ("64g", not "68719476736").
func (b Bytes) String() string {
	n, i := b.whole()
	if i < 0 {
		return strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10) + units[i].docker
}

// KubernetesQuantity writes b as a Kubernetes binary quantity ("64Gi",
// "1536Mi"): the same bytes as String, in Kubernetes' suffixes.
func (b Bytes) KubernetesQuantity() string {
	n, i := b.whole()
	if i < 0 {
		return strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10) + units[i].kubernetes
}

// whole is b in the largest unit (an index into units) that divides it,
// or b itself and -1.
func (b Bytes) whole() (int64, int) {
	n := int64(b)
	for i, u := range units {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return n >> u.shift, i
		}
	}
	return n, -1
}
