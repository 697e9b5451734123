package storesvc_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// fixedReader is a PartialReader whose values are its own buffer, not a
// pooled one.
type fixedReader struct {
	storesvc.Store
	data []byte
}

func (f fixedReader) GetPartialValues(_ context.Context, reqs []storesvc.KeyRange) ([]storesvc.PartialValue, error) {
	out := make([]storesvc.PartialValue, len(reqs))
	for i := range out {
		out[i] = storesvc.PartialValue{Data: f.data, Found: true}
	}
	return out, nil
}

// putTwice reports whether putting b into the pool panics as a buffer that
// is already there.
func putTwice(b []byte) (twice bool) {
	defer func() { twice = recover() != nil }()
	bufpool.Put(b)
	return false
}

// TestPartialValueRelease checks that Release hands a pooled value's buffer
// back to the pool (so putting it once more is a double put), clears the
// value and may be repeated, and leaves a value that is not pooled alone.
func TestPartialValueRelease(t *testing.T) {
	bufpool.CheckDoublePuts()
	ctx := context.Background()
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<12) // 64 KiB: a pool size

	// The portable layer's fallback reads each range into a pooled buffer.
	m := memory.New()
	s := storesvc.Wrap(m)
	if _, err := s.Set(ctx, "k", bytes.NewReader(want), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	vals, err := s.GetPartialValues(ctx, []storesvc.KeyRange{{Key: "k"}, {Key: "missing"}})
	if err != nil {
		t.Fatal(err)
	}
	v := &vals[0]
	if !v.Found || !bytes.Equal(v.Data, want) {
		t.Fatalf("got %d bytes, found %v; want the value", len(v.Data), v.Found)
	}
	if !v.Pooled() {
		t.Fatal("a value read by the portable fallback is not pooled")
	}
	buf := v.Data
	v.Release()
	if v.Data != nil || v.Pooled() {
		t.Fatalf("after Release: %d bytes, pooled %v; want none, false", len(v.Data), v.Pooled())
	}
	v.Release() // a second Release of the same value does nothing
	if !putTwice(buf) {
		t.Fatal("Release did not hand the buffer back to the pool")
	}
	missing := &vals[1]
	if missing.Found || missing.Pooled() {
		t.Fatalf("missing key: found %v, pooled %v", missing.Found, missing.Pooled())
	}
	missing.Release()

	// A backend's own buffer is the caller's to keep: Release leaves it.
	own := make([]byte, 1<<16)
	copy(own, want)
	vals, err = storesvc.Wrap(fixedReader{Store: m, data: own}).GetPartialValues(ctx, []storesvc.KeyRange{{Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	if vals[0].Pooled() {
		t.Fatal("a backend's own buffer is reported pooled")
	}
	vals[0].Release()
	if !bytes.Equal(vals[0].Data, want) {
		t.Fatal("Release changed a value that is not pooled")
	}
	if putTwice(own) {
		t.Fatal("Release put a buffer that is not pooled into the pool")
	}
}
