// Byte counts as people write them: Size formats, ParseSize parses.

package membudget

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size formats a byte count for messages: 256 MiB, 1.5 GiB, 100 B.
func Size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTPE"[exp]) + "iB"
}

// ParseSize parses a byte count as a flag gives it: a plain number of
// bytes, or a number with a unit K, M, G, T (powers of 1024; KiB, MB, GiB
// and k are accepted too), such as 512MiB or 2G.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (K, M, G, T)", s)
	}
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	mult := float64(1)
	switch unit {
	case "":
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	case "T":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (want K, M, G or T)", s, t[i:])
	}
	v *= mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}
