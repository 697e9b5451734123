package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/storesvc"
)

// openLocation opens a store named on the command line: grpc://HOST:PORT
// for a zarrgate server's store, anything else as a local store URL or
// path.
func openLocation(ctx context.Context, loc string) (storesvc.Store, func(), error) {
	if addr, ok := strings.CutPrefix(loc, "grpc://"); ok {
		c, err := client.Dial(ctx, strings.TrimSuffix(addr, "/"))
		if err != nil {
			return nil, nil, err
		}
		s, err := c.Store(ctx)
		if err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("%s: %w", loc, err)
		}
		return s, func() { c.Close() }, nil
	}
	s, err := openStore(ctx, loc)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}

func runCp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cp", stderr)
	workers := fs.Int("j", 8, "keys copied in parallel")
	quiet := fs.Bool("q", false, "no progress line")
	timeout := fs.Duration("timeout", 0, "give up after this long (e.g. 10m); 0: no limit")
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flagErrHelp) {
				return err
			}
			return usageError{err}
		}
		args = fs.Args()
		if len(args) > 0 {
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	if len(pos) != 2 {
		return usageError{errors.New("usage: zarrgate cp [-j N] SRC DST   (each grpc://HOST:PORT or a store URL or directory)")}
	}
	ctx, cancel := withTimeout(ctx, *timeout)
	defer cancel()
	src, closeSrc, err := openLocation(ctx, pos[0])
	if err != nil {
		return err
	}
	defer closeSrc()
	dst, closeDst, err := openLocation(ctx, pos[1])
	if err != nil {
		return err
	}
	defer closeDst()
	stats, err := copyStore(ctx, storesvc.Wrap(src), storesvc.Wrap(dst), max(*workers, 1), progressOut(stderr, *quiet))
	fmt.Fprintf(stdout, "copied %d keys (%s), skipped %d already present\n", stats.copied, humanBytes(stats.bytes), stats.skipped)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("interrupted; run the same command again to resume: %w", err)
	}
	return err
}

type copyStats struct {
	copied, skipped, bytes int64
}

func progressOut(w io.Writer, quiet bool) io.Writer {
	if quiet {
		return io.Discard
	}
	return w
}

// copyStore copies every key of src to dst, skipping keys dst already
// holds with the same size (so an interrupted copy resumes where it
// stopped: every key is written atomically).
func copyStore(ctx context.Context, src, dst *storesvc.Portable, workers int, progress io.Writer) (copyStats, error) {
	var keys []string
	for k, err := range src.ListPrefix(ctx, "") {
		if err != nil {
			return copyStats{}, err
		}
		keys = append(keys, k)
	}
	srcSizes, err := sizesOf(ctx, src, keys)
	if err != nil {
		return copyStats{}, err
	}
	dstSizes, err := sizesOf(ctx, dst, keys)
	if err != nil {
		return copyStats{}, err
	}
	var st copyStats
	var todo []int
	var total int64
	for i := range keys {
		if srcSizes[i] < 0 { // vanished since listing
			continue
		}
		if dstSizes[i] == srcSizes[i] {
			st.skipped++
			continue
		}
		todo = append(todo, i)
		total += srcSizes[i]
	}

	var done, copied atomic.Int64
	start := time.Now()
	stop := make(chan struct{})
	var pw sync.WaitGroup
	pw.Add(1)
	go func() {
		defer pw.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				printProgress(progress, done.Load(), total, start, true)
				return
			case <-t.C:
				printProgress(progress, done.Load(), total, start, false)
			}
		}
	}()

	jobs := make(chan int)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := copyKey(ctx, src, dst, keys[i], &done); err != nil {
					errc <- err
					return
				}
				copied.Add(1)
			}
		}()
	}
	var firstErr error
feed:
	for _, i := range todo {
		select {
		case jobs <- i:
		case firstErr = <-errc:
			break feed
		case <-ctx.Done():
			firstErr = ctx.Err()
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	close(stop)
	pw.Wait()
	if firstErr == nil {
		select {
		case firstErr = <-errc:
		default:
		}
	}
	st.copied, st.bytes = copied.Load(), done.Load()
	return st, firstErr
}

func copyKey(ctx context.Context, src, dst *storesvc.Portable, key string, done *atomic.Int64) error {
	obj, err := src.Get(ctx, key, storesvc.ByteRange{})
	if err != nil {
		return err
	}
	defer obj.Close()
	_, err = dst.Set(ctx, key, &countingReader{r: obj, n: done}, storesvc.Condition{})
	if err != nil {
		return fmt.Errorf("copy %q: %w", key, err)
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func printProgress(w io.Writer, done, total int64, start time.Time, final bool) {
	el := time.Since(start).Seconds()
	rate := float64(done) / max(el, 1e-9)
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	eta := "--:--"
	if rate > 0 && total >= done {
		s := int(float64(total-done) / rate)
		eta = fmt.Sprintf("%02d:%02d", s/60, s%60)
	}
	end := "\r"
	if final {
		end = "\n"
	}
	fmt.Fprintf(w, "\r%s / %s  %5.1f%%  %s/s  ETA %s  %s", humanBytes(done), humanBytes(total), pct, humanBytes(int64(rate)), eta, end)
}
