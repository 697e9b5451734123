package client

import "github.com/zarrgate/zarrgate/internal/bufpool"

// Every test of the package fails (panics) on a buffer recycled twice.
func init() { bufpool.CheckDoublePuts() }
