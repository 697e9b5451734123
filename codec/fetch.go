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

// FetchChooser is a FetchDecoder that decides batch by batch whether
// worker-fetch costs its caller less than reading the encoded chunks from
// the store tier and decoding them itself (remote.Auto's cost model). A
// batch it turns down goes the ordinary way: the caller reads the chunks
// and calls Decode or DecodeSelected.
type FetchChooser interface {
	FetchDecoder
	// PreferFetch reports whether n chunks of spec, stored as stored
	// bytes (-1: not known before they are read), of which selected
	// decoded bytes are wanted back, are better fetched and decoded by the
	// workers.
	PreferFetch(spec *BatchSpec, n int, stored, selected int64) bool
}
