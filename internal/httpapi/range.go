package httpapi

import (
	"strconv"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
)

type rangeKind uint8

const (
	rangeNone rangeKind = iota
	rangeBounded
	rangeFrom
	rangeSuffix
)

// httpRange is one range of a Range header: bytes=first-last,
// bytes=first- or bytes=-n.
type httpRange struct {
	kind        rangeKind
	first, last int64
	n           int64
}

// maxPos is beyond the size of any value a store holds.
const maxPos = 1 << 60

// maxRangeHeader bounds the Range header that is parsed at all.
const maxRangeHeader = 256

// parseRange parses a Range header. A header this server does not take
// (another unit, several ranges, a malformed one) is ignored, as RFC 9110
// §14.2 lets a server do, and the whole value is served; ranged is false
// then. bytes=-0 can never be satisfied: it is an OutOfRange error.
func parseRange(h string) (r httpRange, ranged bool, err error) {
	if h == "" || len(h) > maxRangeHeader {
		return r, false, nil
	}
	spec, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return r, false, nil
	}
	a, b, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return r, false, nil
	}
	num := func(s string) (int64, bool) {
		if s == "" || len(s) > 19 {
			return 0, false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
		}
		v, err := strconv.ParseInt(s, 10, 64)
		return v, err == nil
	}
	switch {
	case a == "":
		n, ok := num(b)
		if !ok {
			return r, false, nil
		}
		if n == 0 {
			return r, true, errs.New(errs.OutOfRange, "range bytes=-0 selects nothing")
		}
		return httpRange{kind: rangeSuffix, n: n}, true, nil
	case b == "":
		f, ok := num(a)
		if !ok {
			return r, false, nil
		}
		return httpRange{kind: rangeFrom, first: f}, true, nil
	}
	f, ok1 := num(a)
	l, ok2 := num(b)
	if !ok1 || !ok2 || l < f {
		return r, false, nil
	}
	if l > maxPos {
		// No value is that large: "to the end" is the same range, and
		// its length cannot overflow.
		return httpRange{kind: rangeFrom, first: f}, true, nil
	}
	return httpRange{kind: rangeBounded, first: f, last: l}, true, nil
}
