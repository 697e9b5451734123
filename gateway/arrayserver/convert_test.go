package arrayserver

import (
	"testing"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/gateway"
)

// TestEnumsMatchTheWire: formats convert by number (so that one the
// engine does not know is refused by its number), and node kinds and byte
// orders map to the wire's values.
func TestEnumsMatchTheWire(t *testing.T) {
	for f, want := range map[gateway.Format]gatewayv1.Format{
		0:                    gatewayv1.Format_FORMAT_UNSPECIFIED,
		gateway.FormatV3:     gatewayv1.Format_FORMAT_ZARR_V3,
		gateway.FormatV2:     gatewayv1.Format_FORMAT_ZARR_V2,
		gateway.FormatNCZarr: gatewayv1.Format_FORMAT_NCZARR,
	} {
		if got := formatProto(f); got != want {
			t.Errorf("format %v: %v on the wire, want %v", f, got, want)
		}
		if got := formatFromProto(want); got != f {
			t.Errorf("wire format %v: %v in the engine, want %v", want, got, f)
		}
	}
	if got := formatFromProto(7); got != 7 {
		t.Errorf("wire format 7: %d in the engine", got)
	}
	if kindProto(gateway.KindArray) != gatewayv1.NodeKind_NODE_KIND_ARRAY || kindProto(gateway.KindGroup) != gatewayv1.NodeKind_NODE_KIND_GROUP {
		t.Error("node kinds map to the wrong wire kinds")
	}
	if byteOrderProto(gateway.LittleEndian) != gatewayv1.ByteOrder_BYTE_ORDER_LITTLE_ENDIAN {
		t.Error("little-endian maps to the wrong wire byte order")
	}
}
