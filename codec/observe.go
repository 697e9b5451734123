package codec

import "time"

// Observer is told of every batch a codec engine runs for its caller (the
// gateway's engine, a codec worker's service): whether it encoded, the
// batch's spec, how many chunks it held, when it started (including any
// wait for memory or for a worker) and its error. Package internal/metrics
// turns this into Prometheus metrics; this package stays free of them (it
// sits below the transport, see internal/archtest). Batch runs on the
// caller's goroutine, so it must be cheap and safe for concurrent use.
type Observer interface {
	Batch(encode bool, spec *BatchSpec, chunks int, start time.Time, err error)
}
