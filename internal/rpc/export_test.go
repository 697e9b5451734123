package rpc

import "time"

// SetDrain sets how much and how long a failed client-streaming call reads
// on, until the test ends.
func SetDrain(t interface{ Cleanup(func()) }, bytes int, d time.Duration) {
	ob, od := drainBytes, drainTime
	drainBytes, drainTime = bytes, d
	t.Cleanup(func() { drainBytes, drainTime = ob, od })
}
