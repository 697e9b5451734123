package codecsvc

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"

	"github.com/zarrgate/zarrgate/errs"
)

// TestGoInflate: the pure-Go build's gzip and zlib decoding answers as
// cInflate does: the output in a pooled buffer, fits false when it does
// not fit, damage and bytes after the stream DataLoss. (internal/inflate
// tests the decoder itself.)
func TestGoInflate(t *testing.T) {
	data := bytes.Repeat([]byte("zarrgate inflates whole chunks "), 10000)
	var g, z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&g, 6)
	w.Write(data)
	w.Close()
	zw, _ := zlib.NewWriterLevel(&z, 6)
	zw.Write(data)
	zw.Close()
	for _, c := range []struct {
		container string
		enc       []byte
	}{{"gzip", g.Bytes()}, {"zlib", z.Bytes()}} {
		out, fits, err := goInflate(c.container, c.enc, 1<<20)
		if err != nil || !fits || !bytes.Equal(out, data) || cap(out) != 1<<20 {
			t.Fatalf("%s: fits %v, %v, equal %v, cap %d", c.container, fits, err, bytes.Equal(out, data), cap(out))
		}
		if _, fits, err := goInflate(c.container, c.enc, len(data)-1); fits || err != nil {
			t.Fatalf("%s, one byte short: fits %v, %v", c.container, fits, err)
		}
		var empty bytes.Buffer
		if c.container == "gzip" {
			w, _ := gzip.NewWriterLevel(&empty, 6)
			w.Close()
		} else {
			w, _ := zlib.NewWriterLevel(&empty, 6)
			w.Close()
		}
		if out, fits, err := goInflate(c.container, empty.Bytes(), 1<<20); err != nil || !fits || out == nil || cap(out) != 0 {
			t.Fatalf("%s, empty: %v, %v, cap %d; want an empty slice of its own", c.container, fits, err, cap(out))
		}
		damaged := bytes.Clone(c.enc)
		damaged[len(damaged)/2] ^= 0xff
		for what, enc := range map[string][]byte{
			"damaged": damaged, "truncated": c.enc[:len(c.enc)-5], "garbage after": append(bytes.Clone(c.enc), "junk"...),
		} {
			_, fits, err := goInflate(c.container, enc, 1<<20)
			if !fits || !errors.Is(err, errs.DataLoss) || !strings.HasPrefix(err.Error(), c.container+": ") {
				t.Errorf("%s %s: fits %v, %v; want DataLoss", c.container, what, fits, err)
			}
		}
	}
}
