package zip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unicode/utf8"
)

// The parts of the ZIP format (PKWARE APPNOTE 6.3) the store reads and
// writes: local file headers, the central directory, and the end records
// including their ZIP64 forms.

const (
	sigLocal       = 0x04034b50
	sigCentral     = 0x02014b50
	sigEnd         = 0x06054b50
	sigEnd64       = 0x06064b50
	sigEnd64Locate = 0x07064b50

	localLen    = 30
	centralLen  = 46
	endLen      = 22
	end64Len    = 56
	end64LocLen = 20

	methodStore   = 0
	methodDeflate = 8
	methodBzip2   = 12
	methodZstd    = 93 // APPNOTE 6.3.7; what Python 3.14's zipfile writes

	flagDataDescriptor = 1 << 3
	flagUTF8           = 1 << 11

	extraZip64 = 0x0001
	// extraPadding is the extra field id Android's zipalign uses for
	// padding. A new member's local header reserves one, 16 bytes of data,
	// which becomes the ZIP64 sizes if the value turns out to need them.
	extraPadding  = 0xd935
	localExtraLen = 4 + 16

	versionPlain = 20
	versionZip64 = 45
	// creatorUnix is "made by" Unix, like Python's zipfile.
	creatorUnix = 3 << 8

	max16 = 0xffff
	max32 = 0xffffffff

	// maxCommentLen bounds the search for the end record from the end of
	// the file.
	maxCommentLen = 0xffff
)

// member is one central directory entry.
type member struct {
	name     string
	creator  uint16
	reader   uint16
	flags    uint16
	method   uint16
	modTime  uint16
	modDate  uint16
	crc      uint32
	csize    uint64
	usize    uint64
	offset   uint64 // of the local header
	extAttrs uint32
	extra    []byte // central extra fields, ZIP64 field removed
	comment  []byte
	// dataOffset, once known, is where the member's data starts (0: not
	// read yet from the local header).
	dataOffset int64
}

func (m *member) isDir() bool { return len(m.name) > 0 && m.name[len(m.name)-1] == '/' }

var errNotZip = errors.New("not a zip archive (no end of central directory record)")

// readDirectory reads the central directory of the archive in f, of the
// given size, and returns its entries in order and the offset where the
// central directory starts: where appended members go.
func readDirectory(f *os.File, size int64) ([]*member, int64, error) {
	tail := min(size, endLen+maxCommentLen+end64LocLen)
	buf := make([]byte, tail)
	if _, err := f.ReadAt(buf, size-tail); err != nil {
		return nil, 0, err
	}
	endAt := -1
	for i := len(buf) - endLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(buf[i:]) == sigEnd && i+endLen+int(binary.LittleEndian.Uint16(buf[i+20:])) <= len(buf) {
			endAt = i
			break
		}
	}
	if endAt < 0 {
		return nil, 0, errNotZip
	}
	end := buf[endAt:]
	count := uint64(binary.LittleEndian.Uint16(end[10:]))
	cdSize := uint64(binary.LittleEndian.Uint32(end[12:]))
	cdOffset := uint64(binary.LittleEndian.Uint32(end[16:]))
	if count == max16 || cdSize == max32 || cdOffset == max32 {
		if endAt < end64LocLen || binary.LittleEndian.Uint32(buf[endAt-end64LocLen:]) != sigEnd64Locate {
			return nil, 0, errors.New("ZIP64 end of central directory locator missing")
		}
		at := int64(binary.LittleEndian.Uint64(buf[endAt-end64LocLen+8:]))
		rec := make([]byte, end64Len)
		if _, err := f.ReadAt(rec, at); err != nil || binary.LittleEndian.Uint32(rec) != sigEnd64 {
			return nil, 0, errors.New("ZIP64 end of central directory record missing")
		}
		count = binary.LittleEndian.Uint64(rec[32:])
		cdSize = binary.LittleEndian.Uint64(rec[40:])
		cdOffset = binary.LittleEndian.Uint64(rec[48:])
	}
	if cdOffset+cdSize > uint64(size) || count > cdSize/centralLen {
		return nil, 0, fmt.Errorf("central directory (%d entries, %d bytes at %d) lies outside the %d-byte file", count, cdSize, cdOffset, size)
	}
	cd := make([]byte, cdSize)
	if _, err := f.ReadAt(cd, int64(cdOffset)); err != nil {
		return nil, 0, err
	}
	members := make([]*member, 0, count)
	for range count {
		if len(cd) < centralLen || binary.LittleEndian.Uint32(cd) != sigCentral {
			return nil, 0, errors.New("corrupt central directory entry")
		}
		m := &member{
			creator: binary.LittleEndian.Uint16(cd[4:]),
			reader:  binary.LittleEndian.Uint16(cd[6:]),
			flags:   binary.LittleEndian.Uint16(cd[8:]),
			method:  binary.LittleEndian.Uint16(cd[10:]),
			modTime: binary.LittleEndian.Uint16(cd[12:]),
			modDate: binary.LittleEndian.Uint16(cd[14:]),
			crc:     binary.LittleEndian.Uint32(cd[16:]),
			csize:   uint64(binary.LittleEndian.Uint32(cd[20:])),
			usize:   uint64(binary.LittleEndian.Uint32(cd[24:])),
			offset:  uint64(binary.LittleEndian.Uint32(cd[42:])),

			extAttrs: binary.LittleEndian.Uint32(cd[38:]),
		}
		n, e, c := int(binary.LittleEndian.Uint16(cd[28:])), int(binary.LittleEndian.Uint16(cd[30:])), int(binary.LittleEndian.Uint16(cd[32:]))
		if len(cd) < centralLen+n+e+c {
			return nil, 0, errors.New("corrupt central directory entry")
		}
		m.name = string(cd[centralLen : centralLen+n])
		extra := cd[centralLen+n : centralLen+n+e]
		m.comment = append([]byte(nil), cd[centralLen+n+e:centralLen+n+e+c]...)
		cd = cd[centralLen+n+e+c:]
		var err error
		if m.extra, err = m.readZip64(extra); err != nil {
			return nil, 0, fmt.Errorf("member %q: %v", m.name, err)
		}
		if m.offset+localLen > cdOffset || m.csize > cdOffset-m.offset {
			return nil, 0, fmt.Errorf("member %q lies outside the archive", m.name)
		}
		members = append(members, m)
	}
	return members, int64(cdOffset), nil
}

// readZip64 takes the 64-bit sizes and offset from the ZIP64 extra field
// and returns the other extra fields.
func (m *member) readZip64(extra []byte) ([]byte, error) {
	var rest []byte
	for len(extra) >= 4 {
		id, n := binary.LittleEndian.Uint16(extra), int(binary.LittleEndian.Uint16(extra[2:]))
		if len(extra) < 4+n {
			break
		}
		field := extra[4 : 4+n]
		if id == extraZip64 {
			for _, p := range []*uint64{&m.usize, &m.csize, &m.offset} {
				if *p != max32 {
					continue
				}
				if len(field) < 8 {
					return nil, errors.New("short ZIP64 extra field")
				}
				*p = binary.LittleEndian.Uint64(field)
				field = field[8:]
			}
		} else {
			rest = append(rest, extra[:4+n]...)
		}
		extra = extra[4+n:]
	}
	return rest, nil
}

// localDataOffset reads the local header at m.offset and returns where the
// data starts.
func localDataOffset(f io.ReaderAt, m *member) (int64, error) {
	var h [localLen]byte
	if _, err := f.ReadAt(h[:], int64(m.offset)); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint32(h[:]) != sigLocal {
		return 0, fmt.Errorf("member %q: no local header at offset %d", m.name, m.offset)
	}
	return int64(m.offset) + localLen + int64(binary.LittleEndian.Uint16(h[26:])) + int64(binary.LittleEndian.Uint16(h[28:])), nil
}

// newMember returns a member for name written now at offset.
func newMember(name string, offset int64, dir bool) *member {
	t := time.Now()
	m := &member{
		name: name, creator: creatorUnix | versionPlain, reader: versionPlain, offset: uint64(offset),
		modTime:  uint16(t.Hour()<<11 | t.Minute()<<5 | t.Second()/2),
		modDate:  uint16(max(t.Year()-1980, 0)<<9 | int(t.Month())<<5 | t.Day()),
		extAttrs: 0o100644 << 16,
	}
	if dir {
		m.extAttrs = 0o40755<<16 | 0x10
	}
	if !isASCII(name) && utf8.ValidString(name) {
		m.flags |= flagUTF8
	}
	return m
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// localHeader encodes m's local header with its reserved extra field.
// Before the data is written crc and sizes are zero; afterwards they are
// patched in, as ZIP64 fields if they need 64 bits.
func (m *member) localHeader() []byte {
	b := make([]byte, localLen+len(m.name)+localExtraLen)
	le := binary.LittleEndian
	le.PutUint32(b, sigLocal)
	le.PutUint16(b[6:], m.flags)
	le.PutUint16(b[8:], m.method)
	le.PutUint16(b[10:], m.modTime)
	le.PutUint16(b[12:], m.modDate)
	le.PutUint16(b[26:], uint16(len(m.name)))
	le.PutUint16(b[28:], localExtraLen)
	copy(b[localLen:], m.name)
	x := b[localLen+len(m.name):]
	if m.usize >= max32 || m.csize >= max32 {
		m.reader = versionZip64
		le.PutUint32(b[18:], max32)
		le.PutUint32(b[22:], max32)
		le.PutUint16(x, extraZip64)
		le.PutUint16(x[2:], 16)
		le.PutUint64(x[4:], m.usize)
		le.PutUint64(x[12:], m.csize)
	} else {
		le.PutUint32(b[18:], uint32(m.csize))
		le.PutUint32(b[22:], uint32(m.usize))
		le.PutUint16(x, extraPadding)
		le.PutUint16(x[2:], 16)
	}
	le.PutUint16(b[4:], m.reader)
	le.PutUint32(b[14:], m.crc)
	return b
}

// appendCentral appends m's central directory entry to b.
func (m *member) appendCentral(b []byte) []byte {
	le := binary.LittleEndian
	var z64 []byte
	usize, csize, offset := uint32(m.usize), uint32(m.csize), uint32(m.offset)
	if m.usize >= max32 {
		usize, z64 = max32, le.AppendUint64(z64, m.usize)
	}
	if m.csize >= max32 {
		csize, z64 = max32, le.AppendUint64(z64, m.csize)
	}
	if m.offset >= max32 {
		offset, z64 = max32, le.AppendUint64(z64, m.offset)
	}
	reader, creator := m.reader, m.creator
	if z64 != nil {
		reader = max(reader, versionZip64)
		creator = creator&0xff00 | max(creator&0xff, versionZip64)
	}
	extra := m.extra
	if z64 != nil {
		extra = le.AppendUint16(le.AppendUint16(nil, extraZip64), uint16(len(z64)))
		extra = append(append(extra, z64...), m.extra...)
	}
	b = le.AppendUint32(b, sigCentral)
	b = le.AppendUint16(b, creator)
	b = le.AppendUint16(b, reader)
	b = le.AppendUint16(b, m.flags)
	b = le.AppendUint16(b, m.method)
	b = le.AppendUint16(b, m.modTime)
	b = le.AppendUint16(b, m.modDate)
	b = le.AppendUint32(b, m.crc)
	b = le.AppendUint32(b, csize)
	b = le.AppendUint32(b, usize)
	b = le.AppendUint16(b, uint16(len(m.name)))
	b = le.AppendUint16(b, uint16(len(extra)))
	b = le.AppendUint16(b, uint16(len(m.comment)))
	b = le.AppendUint16(b, 0) // disk number
	b = le.AppendUint16(b, 0) // internal attributes
	b = le.AppendUint32(b, m.extAttrs)
	b = le.AppendUint32(b, offset)
	b = append(b, m.name...)
	b = append(b, extra...)
	return append(b, m.comment...)
}

// appendEnd appends the end records for a central directory of count
// entries and size bytes at offset, in their ZIP64 form when needed.
func appendEnd(b []byte, count int, offset, size int64) []byte {
	le := binary.LittleEndian
	n16, size32, off32 := uint16(count), uint32(size), uint32(offset)
	if count >= max16 || size >= max32 || offset >= max32 {
		at := offset + size
		b = le.AppendUint32(b, sigEnd64)
		b = le.AppendUint64(b, end64Len-12)
		b = le.AppendUint16(b, creatorUnix|versionZip64)
		b = le.AppendUint16(b, versionZip64)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, uint64(count))
		b = le.AppendUint64(b, uint64(count))
		b = le.AppendUint64(b, uint64(size))
		b = le.AppendUint64(b, uint64(offset))
		b = le.AppendUint32(b, sigEnd64Locate)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, uint64(at))
		b = le.AppendUint32(b, 1)
		n16, size32, off32 = max16, max32, max32
	}
	b = le.AppendUint32(b, sigEnd)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, n16)
	b = le.AppendUint16(b, n16)
	b = le.AppendUint32(b, size32)
	b = le.AppendUint32(b, off32)
	return le.AppendUint16(b, 0)
}
