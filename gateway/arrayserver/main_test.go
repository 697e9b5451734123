package arrayserver

import (
	"context"
	"io"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/storesvc/file"
)

// Every test of the package fails (panics) on a buffer recycled twice, the
// bug behind data of one read showing in another.
func init() { bufpool.CheckDoublePuts() }

var ctx = context.Background()

// testCodecs is the codec engine the server's tests run the gateway on.
var testCodecs = codecsvc.NewLocal()

// newTestGateway is a gateway on a file store in a temporary directory.
func newTestGateway(t *testing.T) *gateway.Gateway {
	t.Helper()
	fs, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return gateway.New(fs, testCodecs, gateway.Config{})
}

// nextFrom is a WriteSlab source of blocks.
func nextFrom(blocks []gateway.Block) func() (gateway.Block, error) {
	return func() (gateway.Block, error) {
		if len(blocks) == 0 {
			return gateway.Block{}, io.EOF
		}
		b := blocks[0]
		blocks = blocks[1:]
		return b, nil
	}
}
