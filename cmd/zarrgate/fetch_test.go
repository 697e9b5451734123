package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// The codec worker's store fetcher reads ranges, and refuses a range read
// from a value of another generation than the ref names (a shard
// rewritten since the gateway read its index) with Aborted.
func TestStoreFetcherGenerations(t *testing.T) {
	ctx := context.Background()
	m := memory.New()
	gen, err := m.Set(ctx, "a/c/0", bytes.NewReader([]byte("0123456789")), storesvc.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	f := storeFetcher{storesvc.Wrap(m)}
	vals, found, err := f.Fetch(ctx, []codec.Ref{{Key: "a/c/0", Offset: 2, Length: 3, Generation: gen}, {Key: "a/c/0", Offset: 8}, {Key: "a/c/1"}}, 100)
	if err != nil || string(vals[0]) != "234" || string(vals[1]) != "89" || !found[0] || !found[1] || found[2] {
		t.Fatalf("ranges: %q %v %v", vals, found, err)
	}
	if _, err := m.Set(ctx, "a/c/0", bytes.NewReader([]byte("9876543210")), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Fetch(ctx, []codec.Ref{{Key: "a/c/0", Offset: 2, Length: 3, Generation: gen}}, 100); !errors.Is(err, errs.Aborted) {
		t.Fatalf("a range of a rewritten value: %v, want Aborted", err)
	}
}
