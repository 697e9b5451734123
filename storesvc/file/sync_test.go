package file

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

// A writer that asks for a directory fsync while one is running waits for
// the next round, which starts after it asked: the running one may have
// begun before its rename. Writers that ask during one round share the
// next.
func TestDirSyncRounds(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	started := make(chan string)
	release := make(chan struct{})
	testHookDirSync = func(dir string) {
		started <- dir
		<-release
	}
	defer func() { testHookDirSync = nil }()

	first := make(chan error, 1)
	go func() { first <- s.syncDir(".") }()
	<-started // round 1 runs, held in the hook
	const n = 5
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for range n {
		wg.Go(func() { errc <- s.syncDir(".") })
	}
	// Wait until all n have joined round 2 (they count as users).
	for {
		s.mu.Lock()
		ds := s.syncers["."]
		users := ds.users
		s.mu.Unlock()
		if users == n+1 {
			break
		}
		runtime.Gosched()
	}
	release <- struct{}{} // round 1 ends
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// Round 2 starts for the n writers; none of them returned with
	// round 1.
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("a writer that joined during round 1 returned with it (%v)", err)
	}
	release <- struct{}{}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, dirs := s.Syncs(); dirs != 2 {
		t.Fatalf("%d directory fsyncs, want 2 (one per round)", dirs)
	}
	// The round's goroutine drops the syncer after it closed the round, so
	// the writers may return before it has: wait for it, a bounded time.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		left := len(s.syncers)
		s.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d directory syncers left 10 s after the rounds", left)
		}
		time.Sleep(time.Millisecond)
	}
}

// Concurrent Sets in one directory: every one is durable when it returns
// (a value fsync each, and a directory fsync, shared when they overlap);
// with DurabilityNone there is none.
func TestSyncsPerDurability(t *testing.T) {
	for _, d := range []Durability{DurabilityFsync, DurabilityNone} {
		t.Run(d.String(), func(t *testing.T) {
			s, err := New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.SetDurability(d)
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					key := "c/0/" + string(rune('0'+i))
					if _, err := s.Set(context.Background(), key, strings.NewReader(key), storesvc.Condition{}); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			files, dirs := s.Syncs()
			switch d {
			case DurabilityFsync:
				if files != 8 || dirs < 1 || dirs > 8 {
					t.Fatalf("fsyncs: %d files, %d directories; want 8, and 1 to 8", files, dirs)
				}
			case DurabilityNone:
				if files != 0 || dirs != 0 {
					t.Fatalf("fsyncs: %d files, %d directories; want none", files, dirs)
				}
			}
			for i := range 8 {
				key := "c/0/" + string(rune('0'+i))
				v, _, err := storesvc.ReadAll(context.Background(), s, key)
				if err != nil || string(v) != key {
					t.Fatalf("%s = %q, %v", key, v, err)
				}
			}
		})
	}
}

// With the directory fsync outside the directory lock, conditional writes
// still conflict: concurrent read-increment-write loops conditioned on the
// generation they read lose no increment, and partial writes of disjoint
// bytes lose none of each other's, with either durability.
func TestConditionalWritesStillConflict(t *testing.T) {
	for _, d := range []Durability{DurabilityFsync, DurabilityNone} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			s, err := New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.SetDurability(d)
			if _, err := s.Set(ctx, "c/n", strings.NewReader("0"), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Set(ctx, "c/p", strings.NewReader(strings.Repeat(".", 16)), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
			const writers, each = 4, 10
			var wg sync.WaitGroup
			var mu sync.Mutex
			conflicts := 0
			for w := range writers {
				wg.Go(func() {
					for done := 0; done < each; {
						o, err := s.Get(ctx, "c/n", storesvc.ByteRange{})
						if err != nil {
							t.Error(err)
							return
						}
						b := make([]byte, o.Size)
						_, err = io.ReadFull(o, b)
						o.Close()
						if err != nil {
							t.Error(err)
							return
						}
						n, _ := strconv.Atoi(string(b))
						_, err = s.Set(ctx, "c/n", strings.NewReader(strconv.Itoa(n+1)), storesvc.Condition{IfGenerationMatch: o.Generation})
						switch {
						case errors.Is(err, errs.FailedPrecondition):
							mu.Lock()
							conflicts++
							mu.Unlock()
						case err != nil:
							t.Error(err)
							return
						default:
							done++
						}
					}
				})
				wg.Go(func() {
					for i := range 4 {
						off := int64(w*4 + i)
						if err := s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "c/p", Offset: off, Data: []byte{byte('a' + w)}}}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			v, _, err := storesvc.ReadAll(ctx, s, "c/n")
			if err != nil || string(v) != strconv.Itoa(writers*each) {
				t.Fatalf("counter = %q, %v; want %d (%d conflicts)", v, err, writers*each, conflicts)
			}
			p, _, err := storesvc.ReadAll(ctx, s, "c/p")
			if err != nil || string(p) != "aaaabbbbccccdddd" {
				t.Fatalf("partial writes left %q, %v", p, err)
			}
			t.Logf("%d conflicts refused", conflicts)
		})
	}
}

// A key below a value, or a value where a prefix's directory is, is
// refused with FailedPrecondition, whichever step of the write finds it.
func TestSetBelowAValue(t *testing.T) {
	ctx := context.Background()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Set(ctx, "a/v", strings.NewReader("x"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a/v/w", "a/v/w/x"} {
		if _, err := s.Set(ctx, key, strings.NewReader("y"), storesvc.Condition{}); !errors.Is(err, errs.FailedPrecondition) {
			t.Errorf("Set %q below the value a/v: %v, want FailedPrecondition", key, err)
		}
	}
	if _, err := s.Set(ctx, "a", strings.NewReader("y"), storesvc.Condition{}); !errors.Is(err, errs.FailedPrecondition) {
		t.Errorf("Set %q, a prefix of a/v: %v, want FailedPrecondition", "a", err)
	}
}
