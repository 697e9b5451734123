// Package shm is the shared memory behind ReadSlabShared: a segment is an
// anonymous memory file (memfd) of the gateway, which a client of the same
// user on the same host opens through /proc/<pid>/fd/<n> and maps
// read-only; Ring hands out the segment's space to blocks in the order
// they are sent.
//
// The segment's first bytes are a random token the gateway also sends over
// the call: a client that finds it knows it mapped the gateway's segment
// and not a namesake on another host or in another process namespace.
package shm

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
)

// DataOffset is where block data may start in a segment: the token comes
// first, padded to a cache line.
const DataOffset = 64

// TokenBytes is the length of a segment's token.
const TokenBytes = 16

// ErrUnsupported is returned where shared memory is not implemented.
var ErrUnsupported = errors.New("shared memory segments are not supported on this platform")

// Segment is the gateway's side of a segment.
type Segment struct {
	Path  string // where a client on this host opens it
	Data  []byte // the whole segment, mapped read-write
	Token []byte

	f *os.File
}

// Create makes a segment of size bytes: a memory file with its pages
// reserved (so that a lack of memory is an error here, not a fault later),
// mapped, with a fresh token. It is not sealed: a client's destination
// must be (OpenDest), so that a client cannot name a segment of the
// gateway's, lent to another read, as its destination.
func Create(size int64) (*Segment, error) { return create(size, false) }

// CreateSealed is Create sealed against shrinking and growing: a segment
// that another process maps read-write (AttachWritable: a codec worker)
// and that its owner therefore must not be able to cut pages off.
func CreateSealed(size int64) (*Segment, error) { return create(size, true) }

func create(size int64, sealed bool) (*Segment, error) {
	if size < DataOffset+1 {
		return nil, fmt.Errorf("shared memory segment of %d bytes is too small", size)
	}
	f, err := memfd(size, sealed)
	if err != nil {
		return nil, err
	}
	data, err := mapFile(f, size, true)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &Segment{Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()), Data: data, Token: make([]byte, TokenBytes), f: f}
	rand.Read(s.Token)
	copy(s.Data, s.Token)
	return s, nil
}

// Close unmaps the segment and closes its file; client mappings stay
// valid.
func (s *Segment) Close() error {
	if s.Data == nil {
		return nil
	}
	err := unmap(s.Data)
	s.Data = nil
	return errors.Join(err, s.f.Close())
}

// Mapping is a client's read-only view of a segment.
type Mapping struct {
	Data []byte
}

// Attach maps the segment at path read-only and checks that it is size
// bytes long and starts with token.
func Attach(path string, size int64, token []byte) (*Mapping, error) {
	return attach(path, size, token, false)
}

// AttachWritable is Attach mapping the segment read-write: for a codec
// worker that writes decoded chunks into the gateway's segment. Only an
// anonymous memory file (a memfd, as Create makes: no name in any
// directory, shared-memory backed) at /proc/<pid>/fd/<n> is mapped, so
// that a caller cannot have a file of the host written through it, and
// only one sealed against shrinking (CreateSealed), so that its
// owner cannot cut pages off under this process's reads and writes. The
// segment's owner may write into it at any time too, so what is read from
// it must be copied out before it is trusted (checked, decoded).
func AttachWritable(path string, size int64, token []byte) (*Mapping, error) {
	return attach(path, size, token, true)
}

// MaxAttachBytes bounds the size of a segment a peer may offer (1 TiB): a
// larger size is refused before anything is opened.
const MaxAttachBytes = 1 << 40

func attach(path string, size int64, token []byte, write bool) (*Mapping, error) {
	if len(token) != TokenBytes || size < DataOffset || size > MaxAttachBytes {
		return nil, fmt.Errorf("shared memory segment %s: bad offer (%d bytes, %d-byte token)", path, size, len(token))
	}
	f, err := openSegment(path, write)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() != size {
		return nil, fmt.Errorf("shared memory segment %s: not a regular file of %d bytes", path, size)
	}
	if write {
		// Written through: only an anonymous memory file, never a file
		// of the host that a caller who knows its first bytes names.
		if err := anonymous(path, f, st); err != nil {
			return nil, fmt.Errorf("shared memory segment %s: %w", path, err)
		}
	}
	data, err := mapFile(f, size, write)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(data[:TokenBytes], token) {
		unmap(data)
		return nil, fmt.Errorf("shared memory segment %s: token differs (another host's file?)", path)
	}
	return &Mapping{Data: data}, nil
}

// Close unmaps the segment.
func (m *Mapping) Close() error {
	if m.Data == nil {
		return nil
	}
	err := unmap(m.Data)
	m.Data = nil
	return err
}
