package storesvc

import (
	"io"
	"time"
)

// Op names a call of the store contract, for an Observer.
type Op uint8

// The calls an Observer is told of.
const (
	OpGet Op = iota
	OpGetPartialValues
	OpSet
	OpSetPartialValues
	OpErase
	OpEraseValues
	OpErasePrefix
	OpListPrefix
	OpListDir
	NumOps // the number of Ops, for tables indexed by Op
)

var opNames = [NumOps]string{"get", "get_partial_values", "set", "set_partial_values", "erase", "erase_values", "erase_prefix", "list_prefix", "list_dir"}

// String is the op's name as metrics label it (snake case, as in the
// abstract store interface).
func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "unknown"
}

// Observer is told of every call the portable layer passes to its backend
// (after validation: refused input never reaches it): which call, when it
// started, the value bytes it read and wrote, and its error. Package
// internal/metrics turns this into Prometheus metrics; this package stays
// free of them (it sits below the transport, see internal/archtest).
// StoreCall runs on the caller's goroutine, so it must be cheap and safe
// for concurrent use. Bytes read are those of the values (or ranges)
// returned: a Get's range as opened, whether or not the caller reads it
// all.
type Observer interface {
	StoreCall(op Op, start time.Time, read, written int64, err error)
}

// WithObserver has o told of every backend call.
func WithObserver(o Observer) Option { return func(p *Portable) { p.obs = o } }

// observe tells the observer of a call that started at start.
func (p *Portable) observe(op Op, start time.Time, read, written int64, err error) {
	if p.obs != nil {
		p.obs.StoreCall(op, start, read, written, err)
	}
}

// now is the start of an observed call: zero when nobody observes, so that
// an unobserved store pays no clock read.
func (p *Portable) now() time.Time {
	if p.obs == nil {
		return time.Time{}
	}
	return time.Now()
}

// countingReader counts the bytes read through it, for Set's bytes
// written. It keeps the WriterTo fast path of readers that have one
// (bytes.Reader: io.Copy hands the whole value to the file in one write
// instead of 32 KiB pieces).
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.r.(io.WriterTo); ok {
		n, err := wt.WriteTo(w)
		c.n += n
		return n, err
	}
	return io.Copy(w, struct{ io.Reader }{c}) // plain reader: io.Copy's own loop, counted by Read
}
