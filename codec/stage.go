package codec

// Stager is an Engine that can lend its caller room for encoded chunks
// that its decode batches then send without copying them: codec workers
// on the caller's host, whose batches carry their chunks in a shared-memory
// segment (codecsvc/remote). A caller reading encoded chunks from a store
// in its own process reads each straight into such a buffer and passes it
// to Decode or DecodeSelected as any encoded chunk; a batch whose chunks
// were not staged, or staged for another stream, is copied as before.
type Stager interface {
	// Stage returns, for the encoded chunks of one batch, of sizes
	// bytes, a buffer each and the function that frees it, all in one
	// segment (so that the batch can go on its stream), or nil where
	// there is no room or no segment (read that chunk into a buffer of
	// your own). The caller must not change a buffer while a batch naming
	// it is out, and calls its release once, after its last use of the
	// buffer and of anything decoded that may alias it; a batch the buffer
	// was sent in keeps its region until its answer arrives.
	Stage(sizes []int64) (bufs [][]byte, release []func())
}
