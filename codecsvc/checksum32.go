package codecsvc

import (
	"encoding/binary"
	"encoding/json"
	"hash/adler32"
	"hash/crc32"

	"github.com/zarrgate/zarrgate/errs"
)

// numcodecs' 32-bit checksum codecs: the payload with a little-endian
// checksum of it before (location "start") or after ("end") it. CRC32 and
// Adler32 default to the start, CRC32C to the end (their location is
// configurable); Fletcher32 and JenkinsLookup3 always append.
func init() {
	Register("numcodecs.crc32", checksumFactory("numcodecs.crc32", true, func(b []byte) uint32 { return crc32.ChecksumIEEE(b) }))
	Register("numcodecs.crc32c", checksumFactory("numcodecs.crc32c", false, func(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }))
	Register("numcodecs.adler32", checksumFactory("numcodecs.adler32", true, adler32.Checksum))
	Register("numcodecs.fletcher32", func(cfg json.RawMessage, _ ChunkSpec) (any, error) {
		var c struct{}
		return checksum32{name: "numcodecs.fletcher32", sum: fletcher32}, lenient(cfg, &c)
	})
	Register("numcodecs.jenkins_lookup3", newJenkins)
}

type checksum32 struct {
	name  string
	start bool
	sum   func([]byte) uint32
}

func checksumFactory(name string, start bool, sum func([]byte) uint32) Factory {
	return func(cfg json.RawMessage, _ ChunkSpec) (any, error) {
		c := struct {
			Location *string `json:"location"`
		}{}
		if err := lenient(cfg, &c); err != nil {
			return nil, err
		}
		start := start
		if c.Location != nil {
			switch *c.Location {
			case "start":
				start = true
			case "end":
				start = false
			default:
				return nil, errs.New(errs.InvalidArgument, "configuration.location %q: want \"start\" or \"end\"", *c.Location)
			}
		}
		return checksum32{name: name, start: start, sum: sum}, nil
	}
}

func (c checksum32) Encode(b []byte) ([]byte, error) {
	out := make([]byte, len(b)+4)
	sum := out[len(b):]
	if c.start {
		sum = out[:4]
		copy(out[4:], b)
	} else {
		copy(out, b)
	}
	binary.LittleEndian.PutUint32(sum, c.sum(b))
	return out, nil
}

func (c checksum32) Decode(b []byte, max int64) ([]byte, error) {
	if len(b) < 4 {
		return nil, errs.New(errs.DataLoss, "%s: %d bytes, too short for a checksum", c.name, len(b))
	}
	data, sum := b[:len(b)-4], b[len(b)-4:]
	if c.start {
		data, sum = b[4:], b[:4]
	}
	if got, want := c.sum(data), binary.LittleEndian.Uint32(sum); got != want {
		return nil, errs.New(errs.DataLoss, "%s checksum mismatch (stored %08x, computed %08x): the chunk is corrupt", c.name, want, got)
	}
	if max >= 0 && int64(len(data)) > max {
		return nil, errs.New(errs.DataLoss, "%s: %d bytes, more than the %d expected", c.name, len(data), max)
	}
	return data, nil
}

func (checksum32) MaxEncodedSize(n int64) int64 { return bound(n, 4) }

// fletcher32 is HDF5's Fletcher-32 (H5_checksum_fletcher32), which
// numcodecs uses: big-endian 16-bit words, a trailing odd byte as the high
// half of a word, sums reduced every 360 words.
func fletcher32(b []byte) uint32 {
	var s1, s2 uint32
	words := len(b) / 2
	for p := 0; words > 0; {
		n := min(words, 360)
		words -= n
		for ; n > 0; n-- {
			s1 += uint32(b[p])<<8 | uint32(b[p+1])
			s2 += s1
			p += 2
		}
		s1 = s1&0xffff + s1>>16
		s2 = s2&0xffff + s2>>16
	}
	if len(b)%2 == 1 {
		s1 += uint32(b[len(b)-1]) << 8
		s2 += s1
		s1 = s1&0xffff + s1>>16
		s2 = s2&0xffff + s2>>16
	}
	s1 = s1&0xffff + s1>>16
	s2 = s2&0xffff + s2>>16
	return s2<<16 | s1
}

// newJenkins is numcodecs JenkinsLookup3: Bob Jenkins' lookup3 hashlittle
// (HDF5's H5_checksum_lookup3) seeded with initval, appended. Its prefix
// (bytes hashed before the data) cannot come from JSON: numcodecs builds
// it with numpy.frombuffer, which takes no JSON value, so only null is
// accepted.
func newJenkins(cfg json.RawMessage, _ ChunkSpec) (any, error) {
	c := struct {
		Initval *int64          `json:"initval"`
		Prefix  json.RawMessage `json:"prefix"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	var seed uint32
	if c.Initval != nil {
		if *c.Initval < 0 || *c.Initval > 0xffffffff {
			return nil, errs.New(errs.InvalidArgument, "configuration.initval %d: want 0 to 2**32-1", *c.Initval)
		}
		seed = uint32(*c.Initval)
	}
	if len(c.Prefix) > 0 && string(c.Prefix) != "null" {
		return nil, errs.New(errs.InvalidArgument, "configuration.prefix: only null is supported")
	}
	return checksum32{name: "numcodecs.jenkins_lookup3", sum: func(b []byte) uint32 { return lookup3(b, seed) }}, nil
}

func rot(x uint32, k uint) uint32 { return x<<k | x>>(32-k) }

// lookup3 is hashlittle from Bob Jenkins' lookup3.c, reading bytes (no
// alignment or endianness assumptions).
func lookup3(k []byte, initval uint32) uint32 {
	a := 0xdeadbeef + uint32(len(k)) + initval
	b, c := a, a
	if len(k) == 0 {
		return c
	}
	for len(k) > 12 {
		a += binary.LittleEndian.Uint32(k)
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a -= c
		a ^= rot(c, 4)
		c += b
		b -= a
		b ^= rot(a, 6)
		a += c
		c -= b
		c ^= rot(b, 8)
		b += a
		a -= c
		a ^= rot(c, 16)
		c += b
		b -= a
		b ^= rot(a, 19)
		a += c
		c -= b
		c ^= rot(b, 4)
		b += a
		k = k[12:]
	}
	var last [12]byte
	copy(last[:], k)
	a += binary.LittleEndian.Uint32(last[:])
	b += binary.LittleEndian.Uint32(last[4:])
	c += binary.LittleEndian.Uint32(last[8:])
	c ^= b
	c -= rot(b, 14)
	a ^= c
	a -= rot(c, 11)
	b ^= a
	b -= rot(a, 25)
	c ^= b
	c -= rot(b, 16)
	a ^= c
	a -= rot(c, 4)
	b ^= a
	b -= rot(a, 14)
	c ^= b
	c -= rot(b, 24)
	return c
}
