package memory_test

import (
	"context"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/storesvc/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) storesvc.Store { return memory.New() })
}

// Two instances never hand out the same generation: one recorded against
// a store that was since restarted cannot match different data.
func TestGenerationsUniqueAcrossInstances(t *testing.T) {
	ctx := context.Background()
	a, b := memory.New(), memory.New()
	ga, err := a.Set(ctx, "k", strings.NewReader("x"), storesvc.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.Set(ctx, "k", strings.NewReader("y"), storesvc.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	if ga == gb {
		t.Fatalf("two stores both gave generation %q", ga)
	}
}
