package shm

import (
	"bytes"
	"errors"
	"fmt"
)

// A destination is the other direction of sharing: memory of a client on
// the gateway's host (a sealed memory file) that the gateway writes a
// slab's data into, in place, saving the copy out of a segment. The
// client makes it (NewDest), puts a random token in its first page, and
// names it to the gateway by its process id and descriptor; the gateway
// opens it through /proc (OpenDest) and checks, before writing a byte,
// that it is a memory file sealed against shrinking (so that no later
// truncation can fault the gateway's writes), large enough, and holds the
// token (so that the gateway writes only to memory the client could
// write itself, the file the client handed over).

// DestOffset is where a destination's data starts: the token has the
// first page, so that the data is page-aligned.
const DestOffset = 4096

// MaxDestBytes bounds a destination's data (1 TiB): sizes and offsets
// computed from it cannot overflow.
const MaxDestBytes = 1 << 40

// Dest is the client's side of a destination.
type Dest struct {
	Pid, Fd int
	Token   []byte
	mem     []byte // the whole mapping, token page included
	close   func() error
}

// Data is the destination's data: size bytes, page-aligned.
func (d *Dest) Data() []byte { return d.mem[DestOffset:] }

// Close unmaps the destination and closes its file.
func (d *Dest) Close() error {
	if d.mem == nil {
		return nil
	}
	d.mem = nil
	return d.close()
}

// DestMap is the gateway's writable mapping of a client's destination.
type DestMap struct {
	Data []byte // the data: exactly the size asked for
	mem  []byte
}

// Close unmaps the destination.
func (m *DestMap) Close() error {
	if m.mem == nil {
		return nil
	}
	err := unmap(m.mem)
	m.mem, m.Data = nil, nil
	return err
}

// ErrDestRefused wraps every reason OpenDest refuses a destination.
var ErrDestRefused = errors.New("shared destination refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrDestRefused, fmt.Sprintf(format, args...))
}

// checkDestToken checks a token as the client sent it: TokenBytes long,
// and not all zeros (the contents of a fresh memory file).
func checkDestToken(token []byte) error {
	if len(token) != TokenBytes {
		return refuse("token of %d bytes, want %d", len(token), TokenBytes)
	}
	if bytes.Equal(token, make([]byte, TokenBytes)) {
		return refuse("token is all zeros")
	}
	return nil
}
