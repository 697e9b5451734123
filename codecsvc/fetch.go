package codecsvc

import (
	"context"
	"fmt"
	"math"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
)

// Fetcher reads encoded chunks from the store tier for a codec worker
// started with one (worker-fetch, SetFetcher). Fetch returns the value of
// each ref, at most max bytes each (a larger one fails the call), and
// found false for a key that holds no value. A key the store's rules
// refuse is InvalidArgument. The worker reads with its own identity: the
// caller has authorized the keys (docs/security.md).
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
		out[i] = &codecv1.ChunkRef{Key: r.Key, Offset: uint64(r.Offset), Length: uint64(r.Length)}
	}
	return out
}

// fetchEncoded reads the encoded chunks a decode request names by key,
// with the memory of their bound reserved first (released by release,
// once the response is written): their values (those found) and which
// were found.
func (s *Server) fetchEncoded(ctx context.Context, spec *codec.BatchSpec, p []*codecv1.ChunkRef) (encoded [][]byte, found []bool, release func(), err error) {
	if s.fetch == nil || s.local == nil {
		return nil, nil, noRelease, errs.New(errs.FailedPrecondition, "decode: this codec worker reads no store tier (start it with --store): send the encoded chunks")
	}
	refs := make([]codec.Ref, len(p))
	for i, r := range p {
		if r.GetKey() == "" {
			return nil, nil, noRelease, errs.New(errs.InvalidArgument, "decode: ref %d has no key", i)
		}
		if r.GetOffset() > math.MaxInt64 || r.GetLength() > math.MaxInt64-r.GetOffset() {
			return nil, nil, noRelease, errs.New(errs.InvalidArgument, "decode: ref %d (%q): offset %d and length %d overflow", i, r.GetKey(), r.GetOffset(), r.GetLength())
		}
		refs[i] = codec.Ref{Key: r.GetKey(), Offset: int64(r.GetOffset()), Length: int64(r.GetLength())}
	}
	c, err := s.local.Chain(spec)
	if err != nil {
		return nil, nil, noRelease, err
	}
	_, _, bound := c.boundsFor(c.Limits().MaxVariableBytes)
	release = noRelease
	if s.budget != nil {
		n := int64(len(refs))
		if bound > 0 && n > math.MaxInt64/bound {
			return nil, nil, noRelease, errs.New(errs.ResourceExhausted, "decode: %d refs of up to %d bytes each need more memory than can be counted", n, bound)
		}
		r, err := s.budget.Acquire(ctx, n*bound, fmt.Sprintf("fetching %d chunks of %v %s", n, spec.Shape, spec.DataType))
		if err != nil {
			return nil, nil, noRelease, err
		}
		release = r.Release
	}
	vals, found, err := s.fetch.Fetch(ctx, refs, bound)
	if err == nil && (len(vals) != len(refs) || len(found) != len(refs)) {
		err = errs.New(errs.DataLoss, "decode: the store tier answered %d values for %d refs", len(vals), len(refs))
	}
	if err != nil {
		release()
		return nil, nil, noRelease, err
	}
	for i, v := range vals {
		if found[i] {
			encoded = append(encoded, v)
		}
	}
	return encoded, found, release, nil
}
