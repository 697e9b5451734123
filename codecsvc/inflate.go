package codecsvc

import (
	"errors"
	"fmt"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/inflate"
)

// goInflate decodes a gzip stream (all its members) or a zlib one with
// the pure-Go build's DEFLATE decoder (internal/inflate), as cInflate
// does in the cgocodecs build: into a pooled buffer of capacity bytes
// (returned whole for Put, not zeroed past the output), refusing anything
// after the stream; fits is false when the output does not fit.
func goInflate(container string, b []byte, capacity int) (out []byte, fits bool, err error) {
	out = bufpool.Get(capacity)
	var n int
	if container == "gzip" {
		n, err = inflate.Gzip(b, out)
	} else {
		var used int
		if n, used, err = inflate.Zlib(b, out); err == nil && used < len(b) {
			err = fmt.Errorf("%d bytes of garbage after the stream", len(b)-used)
		}
	}
	if err != nil || n == 0 {
		bufpool.Put(out)
		if errors.Is(err, inflate.ErrShort) {
			return nil, false, nil
		}
		if err != nil {
			return nil, true, errs.New(errs.DataLoss, "%s: %v", container, err)
		}
		return []byte{}, true, nil // empty: nothing of the pool buffer is returned
	}
	return out[:n], true, nil
}
