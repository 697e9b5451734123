package file

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Writers that reach the directory lock while a batch holds it have their
// renames made together in the next batch, each with its own checks: a
// write whose condition fails is refused alone, the others land.
func TestRenamesCommittedInBatches(t *testing.T) {
	ctx := context.Background()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetDurability(DurabilityNone)
	if _, err := s.Set(ctx, "c/0/taken", strings.NewReader("old"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	batches := make(chan int, 16)
	release, releaseSecond := make(chan struct{}), make(chan struct{})
	testHookCommitBatch = func(dir string, n int) {
		batches <- n
		if n == 1 {
			<-release // the first batch: hold the lock
		} else {
			<-releaseSecond
		}
	}
	defer func() { testHookCommitBatch = nil }()

	first := make(chan error, 1)
	go func() {
		_, err := s.Set(ctx, "c/0/first", strings.NewReader("first"), storesvc.Condition{})
		first <- err
	}()
	if n := <-batches; n != 1 {
		t.Fatalf("first batch of %d", n)
	}
	const n = 8
	errc := make(chan error, n+1)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := s.Set(ctx, "c/0/"+strconv.Itoa(i), strings.NewReader(strconv.Itoa(i)), storesvc.Condition{})
			errc <- err
		})
	}
	wg.Go(func() {
		_, err := s.Set(ctx, "c/0/taken", strings.NewReader("new"), storesvc.Condition{IfAbsent: true})
		errc <- err
	})
	// Wait until all n+1 are queued behind the held batch.
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		s.mu.Lock()
		queued := len(s.committers["c/0"].queue)
		s.mu.Unlock()
		if queued == n+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d writers queued after 10 s", queued, n+1)
		}
	}
	close(release)
	if got := <-batches; got != n+1 {
		t.Fatalf("second batch of %d renames, want %d (one per queued writer)", got, n+1)
	}
	// The first writer led its batch only: it returns while the second
	// batch, run on a goroutine of its own, still holds the lock.
	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first writer still waits while the next batch runs")
	}
	close(releaseSecond)
	wg.Wait()
	close(errc)
	refused := 0
	for err := range errc {
		switch {
		case errors.Is(err, errs.FailedPrecondition):
			refused++
		case err != nil:
			t.Fatal(err)
		}
	}
	if refused != 1 {
		t.Fatalf("%d writes refused, want 1 (the IfAbsent one)", refused)
	}
	for i := range n {
		v, _, err := storesvc.ReadAll(ctx, s, "c/0/"+strconv.Itoa(i))
		if err != nil || string(v) != strconv.Itoa(i) {
			t.Fatalf("c/0/%d = %q, %v", i, v, err)
		}
	}
	if v, _, err := storesvc.ReadAll(ctx, s, "c/0/taken"); err != nil || string(v) != "old" {
		t.Fatalf("c/0/taken = %q, %v; the refused write must not land", v, err)
	}
	// The batch's goroutine drops the committer after it signalled the
	// writers: wait for it, a bounded time.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		left := len(s.committers)
		s.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d committers left 10 s after every write returned", left)
		}
	}
}

// A write whose directory was removed (and made again) before its batch
// ran is Aborted and leaves nothing, while the batch's other writes land;
// a panic in one request's step is that request's Internal error only.
func TestCommitBatchChecksEachDirectory(t *testing.T) {
	root := t.TempDir()
	s, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale, err := s.root.OpenRoot("a")
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	// The directory is replaced: stale is the removed one.
	if err := os.Rename(filepath.Join(root, "a"), filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	fresh, err := s.root.OpenRoot("a")
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	ran := map[string]bool{}
	reqs := []*commitReq{
		{key: "a/stale", d: stale, fn: func() error { ran["stale"] = true; return nil }, done: make(chan struct{})},
		{key: "a/boom", d: fresh, fn: func() error { panic("boom") }, done: make(chan struct{})},
		{key: "a/fresh", d: fresh, fn: func() error { ran["fresh"] = true; return nil }, done: make(chan struct{})},
	}
	s.commitBatch("a", reqs)
	for _, r := range reqs {
		select {
		case <-r.done:
		default:
			t.Fatalf("%s not signalled", r.key)
		}
	}
	if !errors.Is(reqs[0].err, errs.Aborted) || ran["stale"] {
		t.Fatalf("stale directory: err %v, ran %v; want Aborted without its step", reqs[0].err, ran["stale"])
	}
	if !errors.Is(reqs[1].err, errs.Internal) {
		t.Fatalf("panicking step: err %v, want Internal", reqs[1].err)
	}
	if reqs[2].err != nil || !ran["fresh"] {
		t.Fatalf("fresh directory: err %v, ran %v", reqs[2].err, ran["fresh"])
	}
	// A batch for a directory that no longer exists aborts every request.
	if err := os.Rename(filepath.Join(root, "a"), filepath.Join(root, "gone2")); err != nil {
		t.Fatal(err)
	}
	r := &commitReq{key: "a/x", d: fresh, fn: func() error { t.Error("ran without its directory"); return nil }, done: make(chan struct{})}
	s.commitBatch("a", []*commitReq{r})
	if !errors.Is(r.err, errs.Aborted) {
		t.Fatalf("removed directory: err %v, want Aborted", r.err)
	}
}
