package storesvc

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// sliceRecorder keeps the slices it is given (not copies of them).
type sliceRecorder struct{ got [][]byte }

func (w *sliceRecorder) Write(p []byte) (int, error) {
	w.got = append(w.got, p)
	return len(p), nil
}

// A value in memory up to copyWhole is written from its own bytes in one
// Write; a larger one, or one from a stream, goes through the buffer in
// copyStep steps; a cancelled context writes nothing.
func TestCopyContext(t *testing.T) {
	ctx := context.Background()
	value := bytes.Repeat([]byte("0123456789abcdef"), (3*copyStep)/16)
	var w sliceRecorder
	n, err := CopyContext(ctx, &w, bytes.NewReader(value))
	if err != nil || n != int64(len(value)) {
		t.Fatalf("copied %d, %v", n, err)
	}
	if len(w.got) != 1 || &w.got[0][0] != &value[0] || len(w.got[0]) != len(value) {
		t.Fatalf("%d writes; want one of the value's own bytes", len(w.got))
	}

	big := make([]byte, copyWhole+1)
	w = sliceRecorder{}
	if n, err := CopyContext(ctx, &w, bytes.NewReader(big)); err != nil || n != int64(len(big)) {
		t.Fatalf("copied %d, %v", n, err)
	}
	if len(w.got) != 5 || &w.got[0][0] == &big[0] {
		t.Fatalf("%d writes of a value over copyWhole; want 5 steps through the buffer", len(w.got))
	}

	var out bytes.Buffer
	if n, err := CopyContext(ctx, &out, io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd"))); err != nil || n != 4 || out.String() != "abcd" {
		t.Fatalf("stream: %d %q %v", n, out.String(), err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	w = sliceRecorder{}
	if _, err := CopyContext(cancelled, &w, bytes.NewReader(value)); err != context.Canceled || len(w.got) != 0 {
		t.Fatalf("cancelled: %v, %d writes", err, len(w.got))
	}
}
