package memory_test

import (
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/storesvc/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) storesvc.Store { return memory.New() })
}
