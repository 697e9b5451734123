package gateway

import "github.com/zarrgate/zarrgate/internal/bufpool"

// Every test of the package fails (panics) on a buffer recycled twice, the
// bug behind data of one read showing in another.
func init() { bufpool.CheckDoublePuts() }
