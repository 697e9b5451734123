package gateway

import (
	"context"
	"errors"
	"io"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Encoded chunks read straight into shared memory. With the store's reads
// in this process (storesvc.LocalReads: file, zip, memory) and the codecs
// on workers on this host that took a shared-memory segment (codec.Stager,
// codecsvc/remote), readChunksHeld reads each whole encoded chunk straight
// into room of a segment the batch is then sent in, instead of into a
// buffer of its own that the engine copies into the segment: one copy of
// every encoded byte fewer. A chunk for which there is no room is read
// into a pooled buffer as before (the engine copies it in, or the batch
// goes as bytes). Shards (index and inner-chunk ranges), remote stores and
// worker-fetch read as before.

// readStagedFanout bounds the chunks of one batch read at once.
const readStagedFanout = 8

// stager is the engine's Stager when l's chunks read from a store in
// this process may go to codec workers through shared memory, else nil.
func (g *Gateway) stager(l *layout) codec.Stager {
	if !g.localReads || l.codec.inProcess() {
		return nil
	}
	ec, ok := l.codec.(engineCodec)
	if !ok {
		return nil
	}
	st, _ := ec.c.(codec.Stager)
	return st
}

// readStaged is GetPartialValuesMax for whole values (reqs name no
// ranges) read into room st lends, where it has some: release[i] frees
// value i's buffer (nil for a value not found). The values are opened
// first, so that the batch's room is asked for at once (in one segment),
// then read. The values are not pooled (their buffers are released
// through release only). On an error every buffer is freed.
func (g *Gateway) readStaged(ctx context.Context, reqs []storesvc.KeyRange, max int64, st codec.Stager) (_ []storesvc.PartialValue, release []func(), err error) {
	objs := make([]*storesvc.Object, len(reqs))
	defer func() {
		for _, o := range objs {
			if o != nil {
				o.Close()
			}
		}
	}()
	sizes := make([]int64, len(reqs))
	open := func(i int) error {
		obj, err := g.store.Get(ctx, reqs[i].Key, reqs[i].Range)
		switch {
		case errors.Is(err, storesvc.ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		objs[i] = obj
		if max > 0 && obj.Length > max {
			return errs.New(errs.DataLoss, "%q holds %d bytes, more than any value stored there can (%d)", reqs[i].Key, obj.Length, max)
		}
		sizes[i] = obj.Length
		return nil
	}
	// Opened side by side, as they are then read.
	if err := eachOf(len(reqs), open); err != nil {
		return nil, nil, err
	}
	bufs, release := st.Stage(sizes)
	if bufs == nil {
		bufs, release = make([][]byte, len(reqs)), make([]func(), len(reqs))
	}
	out := make([]storesvc.PartialValue, len(reqs))
	for i, obj := range objs {
		if obj == nil {
			continue
		}
		if bufs[i] == nil {
			b := bufpool.Get(int(obj.Length))
			bufs[i], release[i] = b, func() { bufpool.Put(b) }
		}
		out[i] = storesvc.PartialValue{Data: bufs[i], Found: true, Generation: obj.Generation}
	}
	read := func(i int) error {
		if objs[i] == nil {
			return nil
		}
		if _, err := io.ReadFull(objs[i], bufs[i]); err != nil {
			return errs.Wrap(errs.DataLoss, err, "get %q: read %d bytes", reqs[i].Key, len(bufs[i]))
		}
		return nil
	}
	if err = eachOf(len(reqs), read); err != nil {
		for _, free := range release {
			if free != nil {
				free()
			}
		}
		return nil, nil, err
	}
	return out, release, nil
}

// eachOf runs f for 0..n-1, readStagedFanout at a time, and returns the
// first error.
func eachOf(n int, f func(int) error) error {
	if n == 1 {
		return f(0)
	}
	var eg errgroup.Group
	eg.SetLimit(readStagedFanout)
	for i := range n {
		eg.Go(func() error { return f(i) })
	}
	return eg.Wait()
}
