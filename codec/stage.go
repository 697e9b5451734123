package codec

// Stager is an Engine that can lend its caller room for encoded chunks
// that its decode batches then send without copying them: codec workers
// on the caller's host, whose batches carry their chunks in a shared-memory
// segment (codecsvc/remote). A caller reading encoded chunks from a store
// in its own process reads each straight into such a buffer and passes it
// to Decode or DecodeSelected as any encoded chunk; a batch whose chunks
// were not staged, or staged for another stream, is copied as before.
type Stager interface {
	// Stage returns a buffer of n bytes for one encoded chunk, and the
	// function that frees it, or nil (no room, no segment: read into a
	// buffer of your own). The caller must not change the buffer while a
	// batch naming it is out, and calls release once, after its last use
	// of the buffer and of anything decoded that may alias it; a batch
	// the buffer was sent in keeps its region until its answer arrives.
	Stage(n int64) (buf []byte, release func())
}
