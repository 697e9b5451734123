//go:build !linux

package bulk

import "io"

// rawReader is Linux's readv reader; elsewhere ReadInto reads through the
// connection's Read.
type rawReader struct{}

func newRawReader(io.Reader) *rawReader { return nil }

func (*rawReader) readv([][]byte) (int, error) { panic("bulk: no readv here") }
