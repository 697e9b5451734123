package file_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
)

// ReadFullVec fills the buffers in order from the object's position, over
// more buffers than one preadv takes, within a range, and refuses to read
// past the object's end.
func TestReadFullVec(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	value := make([]byte, 5000)
	for i := range value {
		value[i] = byte(i * 7)
	}
	if _, err := s.Set(ctx, "k", bytes.NewReader(value), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	read := func(r storesvc.ByteRange, skip int, sizes ...int) ([]byte, error) {
		obj, err := s.Get(ctx, "k", r)
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		io.CopyN(io.Discard, obj, int64(skip))
		vr, ok := obj.ReadCloser.(storesvc.VecReader)
		if !ok {
			t.Fatal("a file object is no VecReader")
		}
		var bufs [][]byte
		for _, n := range sizes {
			bufs = append(bufs, make([]byte, n))
		}
		err = vr.ReadFullVec(bufs)
		rest, _ := io.ReadAll(obj)
		return append(bytes.Join(bufs, nil), rest...), err
	}
	if got, err := read(storesvc.ByteRange{}, 0, 10, 0, 990, 4000); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("whole value: %v, equal %v", err, bytes.Equal(got, value))
	}
	ones := make([]int, 3000) // three preadv calls
	for i := range ones {
		ones[i] = 1
	}
	if got, err := read(storesvc.ByteRange{}, 100, ones...); err != nil || !bytes.Equal(got, value[100:]) {
		t.Fatalf("3000 one-byte buffers after 100 bytes: %v, equal %v", err, bytes.Equal(got, value[100:]))
	}
	if got, err := read(storesvc.Bounded(1000, 2000), 0, 500, 1500); err != nil || !bytes.Equal(got, value[1000:3000]) {
		t.Fatalf("range: %v, equal %v", err, bytes.Equal(got, value[1000:3000]))
	}
	if _, err := read(storesvc.Bounded(1000, 2000), 0, 1500, 501); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("past the range's end: %v", err)
	}
	if _, err := read(storesvc.ByteRange{}, 0, 5001); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("past the value's end: %v", err)
	}
}
