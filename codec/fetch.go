package codec

import "context"

// Ref names an encoded chunk in the store tier: the value under Key, or
// Length bytes of it from Offset (Length 0: to the value's end): a
// shard's inner chunk, at the range its index gives. Generation, when not
// empty, is the generation of the value the range must be read from (the
// one the index was read from): a value of another generation fails the
// batch with Aborted (the caller reads the index again).
type Ref struct {
	Key            string
	Offset, Length int64
	Generation     string
}

// FetchDecoder is an Engine whose workers read encoded chunks from the
// store tier themselves (worker-fetch): the caller sends keys instead of
// bytes, and the worker fetches, decodes and answers with the selections
// (as SelectDecoder; sel may be nil: every chunk whole). found[i] is false
// for a key that holds no value, whose chunk is empty. The caller must
// have authorized every key: the worker reads with its own identity.
type FetchDecoder interface {
	DecodeFetched(ctx context.Context, spec *BatchSpec, refs []Ref, sel []Selection) (chunks []Chunk, found []bool, err error)
}
