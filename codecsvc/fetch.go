package codecsvc

import (
	"context"
	"fmt"
	"math"
	"slices"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
)

// Fetcher reads encoded chunks from the store tier for a codec worker
// started with one (worker-fetch, SetFetcher). Fetch returns the value of
// each ref, at most max bytes each (a larger one fails the call), and
// found false for a key that holds no value. A key the store's rules
// refuse is InvalidArgument; a ref with a Generation read from a value of
// another generation is Aborted. The worker reads with its own identity:
// the caller has authorized the keys (docs/security.md).
type Fetcher interface {
	Fetch(ctx context.Context, refs []codec.Ref, max int64) (vals [][]byte, found []bool, err error)
}

// SetFetcher lets the service decode batches given as keys (refs),
// reading them through f. Call it before serving.
func (s *Server) SetFetcher(f Fetcher) { s.fetch = f }

// RefsToProto converts chunk references for the wire.
func RefsToProto(refs []codec.Ref) []*codecv1.ChunkRef {
	out := make([]*codecv1.ChunkRef, len(refs))
	for i, r := range refs {
		out[i] = &codecv1.ChunkRef{Key: r.Key, Offset: uint64(r.Offset), Length: uint64(r.Length), Generation: r.Generation}
	}
	return out
}

// fetchEncoded reads the encoded chunks a decode request names by key,
// with the memory of their bound reserved in g (nil: no budget) before
// they are read: their values (those found), which were found, and the
// bytes read (which g keeps holding for the batch's decoding; the rounds'
// bounds it gives back, unless the batch was started again).
func (s *Server) fetchEncoded(ctx context.Context, spec *codec.BatchSpec, p []*codecv1.ChunkRef, g *grant) (encoded [][]byte, found []bool, read int64, err error) {
	if s.fetch == nil || s.local == nil {
		return nil, nil, 0, errs.New(errs.FailedPrecondition, "decode: this codec worker reads no store tier (start it with --store): send the encoded chunks")
	}
	refs := make([]codec.Ref, len(p))
	for i, r := range p {
		if r.GetKey() == "" {
			return nil, nil, 0, errs.New(errs.InvalidArgument, "decode: ref %d has no key", i)
		}
		if r.GetOffset() > math.MaxInt64 || r.GetLength() > math.MaxInt64-r.GetOffset() {
			return nil, nil, 0, errs.New(errs.InvalidArgument, "decode: ref %d (%q): offset %d and length %d overflow", i, r.GetKey(), r.GetOffset(), r.GetLength())
		}
		refs[i] = codec.Ref{Key: r.GetKey(), Offset: int64(r.GetOffset()), Length: int64(r.GetLength()), Generation: r.GetGeneration()}
	}
	c, err := s.local.Chain(spec)
	if err != nil {
		return nil, nil, 0, err
	}
	_, _, bound := c.boundsFor(c.Limits().MaxVariableBytes)
	for i, r := range refs {
		if bound > 0 && r.Length > bound {
			return nil, nil, 0, errs.New(errs.InvalidArgument, "decode: ref %d (%q) asks for %d bytes, more than any encoding of a %v %s chunk (%d)", i, r.Key, r.Length, spec.Shape, spec.DataType, bound)
		}
	}
	// The bound of each chunk is reserved before it is read; the grant
	// then needs only the bytes read beside the next round's bound.
	// Variable-length chunks have no useful bound (each up to
	// --max-variable-chunk-bytes): a batch of them is fetched in rounds of
	// as many as the budget can hold at their bound beside the bytes read
	// before, so that a batch of small strings needs its bytes and one
	// round's bound, not every chunk's. Fixed-size batches are fetched at
	// once (their decoded results must fit beside them anyway).
	vals, found := make([][]byte, 0, len(refs)), make([]bool, 0, len(refs))
	for lo := 0; lo < len(refs); {
		per := len(refs) - lo
		if g != nil && c.variable && bound > 0 {
			per = int(max(1, min(int64(per), (s.budget.Limit()-read)/bound)))
		}
		part := refs[lo : lo+per]
		lo += per
		if g != nil {
			n := int64(len(part))
			if bound > 0 && n > (math.MaxInt64-read)/bound {
				return nil, nil, 0, errs.New(errs.ResourceExhausted, "decode: %d refs of up to %d bytes each need more memory than can be counted", n, bound)
			}
			if err := g.grow(ctx, read+n*bound, fmt.Sprintf("fetching %d chunks of %v %s", n, spec.Shape, spec.DataType)); err != nil {
				return nil, nil, 0, err
			}
		}
		v, f, r, err := s.fetchRefs(ctx, part, bound)
		if err != nil {
			return nil, nil, 0, err
		}
		read += min(r, int64(len(part))*bound)
		vals, found = append(vals, v...), append(found, f...)
	}
	if g != nil {
		g.settle(read) // the rounds' bounds are done with
	}
	for i, v := range vals {
		if found[i] {
			encoded = append(encoded, v)
		}
	}
	return encoded, found, read, nil
}

// maxRunBytes bounds a run of coalesced ranges (as the gateway's own).
const maxRunBytes = 8 << 20

// refPiece locates a ref in the value of a coalesced run.
type refPiece struct {
	run    int
	off, n int64
}

// coalesceRefs merges bounded ranges of one value (same key, same
// generation) that follow each other into single refs, up to maxRunBytes a
// run; piece i says where ref i lies in which run. Refs that read to a
// value's end are never merged.
func coalesceRefs(refs []codec.Ref) (runs []codec.Ref, pieces []refPiece) {
	pieces = make([]refPiece, len(refs))
	var end int64
	for i, r := range refs {
		if k := len(runs) - 1; i > 0 && r.Length > 0 && runs[k].Length > 0 && r.Key == runs[k].Key && r.Generation == runs[k].Generation &&
			r.Offset == end && runs[k].Length+r.Length <= maxRunBytes {
			pieces[i] = refPiece{run: k, off: r.Offset - runs[k].Offset, n: r.Length}
			runs[k].Length += r.Length
			end += r.Length
			continue
		}
		runs = append(runs, r)
		pieces[i] = refPiece{run: len(runs) - 1, n: r.Length}
		end = r.Offset + r.Length
	}
	return runs, pieces
}

// uncoalesceRefs cuts the values of coalesced runs back into the refs'
// ranges (a run that came back short, its value shrunk since, is
// OutOfRange, as a range past a value's end is).
func uncoalesceRefs(refs []codec.Ref, vals [][]byte, found []bool, pieces []refPiece) ([][]byte, []bool, error) {
	out, fout := make([][]byte, len(pieces)), make([]bool, len(pieces))
	for i, p := range pieces {
		if fout[i] = found[p.run]; !fout[i] {
			continue
		}
		v := vals[p.run]
		if p.n == 0 { // a ref to the value's end is a run of its own
			out[i] = v
			continue
		}
		if p.off+p.n > int64(len(v)) {
			return nil, nil, errs.New(errs.OutOfRange, "decode: %q: read %d bytes where %d were asked for", refs[i].Key, len(v), p.off+p.n)
		}
		out[i] = v[p.off : p.off+p.n : p.off+p.n]
	}
	return out, fout, nil
}

// fetchRefs reads refs through the fetcher, ranges of one value that follow
// each other as one run (a shard's inner chunks, written in order: one
// store read, not one per chunk; every piece is within bound, so a run
// holds no more than the memory reserved for its pieces): each ref's
// value, whether it was found, and the bytes read.
func (s *Server) fetchRefs(ctx context.Context, refs []codec.Ref, bound int64) (vals [][]byte, found []bool, read int64, err error) {
	runs, pieces := refs, []refPiece(nil)
	runMax := bound
	if !slices.ContainsFunc(refs, func(r codec.Ref) bool { return r.Length == 0 }) {
		// Only ranges: a run's value is at most its length, whatever max
		// says. (A whole value beside them is read with max bound.)
		runs, pieces = coalesceRefs(refs)
		for _, r := range runs {
			runMax = max(runMax, r.Length)
		}
	}
	vals, found, err = s.fetch.Fetch(ctx, runs, runMax)
	if err == nil && (len(vals) != len(runs) || len(found) != len(runs)) {
		err = errs.New(errs.DataLoss, "decode: the store tier answered %d values for %d refs", len(vals), len(runs))
	}
	if err != nil {
		return nil, nil, 0, err
	}
	for _, v := range vals {
		read += int64(len(v))
	}
	if len(runs) != len(refs) {
		vals, found, err = uncoalesceRefs(refs, vals, found, pieces)
	}
	return vals, found, read, err
}
