package storeserver

import "time"

// SetSharedIdle sets how long GetPartialValuesShared waits for a client's
// next message, until the returned function restores it.
func SetSharedIdle(d time.Duration) func() {
	old := sharedIdle
	sharedIdle = d
	return func() { sharedIdle = old }
}

// BatchReads is batchReads.
var BatchReads = batchReads
