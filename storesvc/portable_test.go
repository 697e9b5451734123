package storesvc_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/storesvc/storetest"
)

// basic exposes only the required Store methods of a backend and the
// capabilities it is told to claim, so the portable layer's fallbacks and
// refusals run against a real store.
type basic struct {
	storesvc.Store
	caps storesvc.Capabilities
}

func (b basic) Capabilities() storesvc.Capabilities { return b.caps }

// A store with only the required methods plus conditional writes gets every
// optional operation from the portable layer, partial writes included (as a
// read-modify-write conditioned on the generation).
func TestConformanceFallbacks(t *testing.T) {
	storetest.Run(t, func(*testing.T) storesvc.Store {
		m := memory.New()
		return basic{Store: m, caps: m.Capabilities()}
	})
}

func TestWithoutCapabilities(t *testing.T) {
	ctx := context.Background()
	m := memory.New()
	s := storesvc.Wrap(basic{Store: m, caps: storesvc.Capabilities{Readable: true, Writable: true}})
	if _, err := s.Set(ctx, "k", strings.NewReader("v"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{
		"conditional set": func() error {
			_, err := s.Set(ctx, "k", strings.NewReader("v"), storesvc.Condition{IfAbsent: true})
			return err
		}(),
		"set_partial_values": s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "k", Data: []byte("x")}}),
		"erase":              s.Erase(ctx, "k", storesvc.Condition{}),
		"erase_prefix":       s.ErasePrefix(ctx, ""),
	}
	for _, err := range s.ListPrefix(ctx, "") {
		checks["list_prefix"] = err
	}
	for what, err := range checks {
		if !errors.Is(err, storesvc.ErrUnsupported) {
			t.Errorf("%s without the capability: %v, want ErrUnsupported", what, err)
		}
	}
	if c := s.Capabilities(); c.PartialWrites {
		t.Errorf("partial writes claimed without conditional writes: %+v", c)
	}
	noread := storesvc.Wrap(basic{Store: m, caps: storesvc.Capabilities{Writable: true}})
	if _, err := noread.Get(ctx, "k", storesvc.ByteRange{}); !errors.Is(err, storesvc.ErrUnsupported) {
		t.Errorf("get on an unreadable store: %v", err)
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range storetest.UnusualKeys {
		if err := storesvc.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range storetest.InvalidKeys {
		if err := storesvc.ValidateKey(k); !errors.Is(err, storesvc.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, k := range append(storetest.UnusualKeys, storetest.InvalidKeys...) {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if storesvc.ValidateKey(key) != nil {
			return
		}
		// A valid key never climbs out of, or lands on, the root.
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("ValidateKey accepted %q", key)
			}
		}
	})
}

// waitingStore is a backend that says nothing about where its reads run.
type waitingStore struct{ storesvc.Store }

// TestLocalReads: the memory and file stores say their reads run in this
// process, through any number of portable layers; a store that says
// nothing (a remote one) is taken to wait elsewhere.
func TestLocalReads(t *testing.T) {
	fs, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for _, c := range []struct {
		name string
		s    storesvc.Store
		want bool
	}{
		{"memory", memory.New(), true},
		{"file", fs, true},
		{"portable memory", storesvc.Wrap(memory.New()), true},
		{"read-only portable over portable file", storesvc.Wrap(storesvc.Wrap(fs), storesvc.ReadOnly()), true},
		{"a store that says nothing", waitingStore{memory.New()}, false},
		{"portable over one", storesvc.Wrap(waitingStore{memory.New()}), false},
	} {
		if got := storesvc.LocalReads(c.s); got != c.want {
			t.Errorf("%s: LocalReads %v, want %v", c.name, got, c.want)
		}
	}
}
