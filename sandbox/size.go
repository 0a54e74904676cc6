package sandbox

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// sizeRE is docker's memory syntax (github.com/docker/go-units RAMInBytes):
// a number, an optional binary unit, an optional "i"/"b" ("64g", "512MiB").
var sizeRE = lazyre.New(`^(\d+(?:\.\d+)?) ?([kKmMgGtTpP])?[iI]?[bB]?$`)

// ParseSize reads a docker memory size ("200g", "512m", "1073741824") as
// bytes. Units are binary (1k = 1024), as docker reads them.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size (want docker syntax such as 512m, 64g)", s)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	shift := map[string]uint{"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50}[strings.ToLower(m[2])]
	v := n * float64(uint64(1)<<shift)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if v < 1 {
		return 0, fmt.Errorf("%q is not a positive size", s)
	}
	return int64(v), nil
}

// FormatSize writes bytes in docker syntax, in the largest unit that keeps
// it whole, so argv stays readable ("64g", not "68719476736").
func FormatSize(n int64) string {
	units := []struct {
		suffix string
		shift  uint
	}{{"p", 50}, {"t", 40}, {"g", 30}, {"m", 20}, {"k", 10}}
	for _, u := range units {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
