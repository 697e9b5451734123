package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/storesvc"
)

// openLocation opens a store named on the command line: grpc://HOST:PORT
// for a zarrgate server's store (dialled with opts: --tls-ca and the
// other TLS flags apply to both sides), anything else as a local store
// URL or path.
func openLocation(ctx context.Context, loc string, opts ...client.Option) (storesvc.Store, func(), error) {
	if addr, ok := strings.CutPrefix(loc, "grpc://"); ok {
		c, err := client.Dial(ctx, strings.TrimSuffix(addr, "/"), opts...)
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

const cpUsage = "usage: zarrgate cp [-j N] [--delete] [--dry-run] [--checksum] [--prefix PATH] [-v] [-q] SRC DST   (each grpc://HOST:PORT or a store URL or directory)"

func runCp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cp", stderr)
	workers := fs.Int("j", 8, "keys copied in parallel")
	quiet := fs.Bool("q", false, "no progress line (it is drawn only when stderr is a terminal)")
	verbose := fs.Bool("v", false, "list every key with what was done to it and why")
	del := fs.Bool("delete", false, "remove destination keys that are absent at the source (under --prefix only)")
	dryRun := fs.Bool("dry-run", false, "list what would be copied and deleted; change nothing")
	checksum := fs.Bool("checksum", false, "compare every key of equal size by SHA-256, ignoring the generations recorded by earlier copies")
	prefix := fs.String("prefix", "", "copy only the keys under this path (a group or array and everything below it)")
	record := fs.String("record", "", "file recording which source generation each destination key is a copy of (default: one per SRC and DST under the user cache directory)")
	timeout := fs.Duration("timeout", 0, "give up after this long (e.g. 10m); 0: no limit")
	tlsOpts := clientTLSFlags(fs)
	tokenOpts := tokenFlag(fs)
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
		return usageError{errors.New(cpUsage)}
	}
	o := &cpOptions{
		workers:  max(*workers, 1),
		del:      *del,
		dryRun:   *dryRun,
		checksum: *checksum,
		verbose:  *verbose,
		out:      stdout,
	}
	if p := strings.Trim(*prefix, "/"); p != "" {
		o.prefix = p + "/"
	}
	if !*quiet && isTerminal(stderr) {
		o.progress = stderr
	}
	copts, err := tlsOpts()
	if err != nil {
		return err
	}
	copts = append(copts, tokenOpts()...)
	ctx, cancel := withTimeout(ctx, *timeout)
	defer cancel()
	src, closeSrc, err := openLocation(ctx, pos[0], copts...)
	if err != nil {
		return err
	}
	defer closeSrc()
	dst, closeDst, err := openLocation(ctx, pos[1], copts...)
	if err != nil {
		return err
	}
	defer closeDst()
	if o.del && !o.dryRun && !dst.Capabilities().Erasable {
		return usageError{fmt.Errorf("--delete: %s cannot erase keys (a zip archive or a read-only store)", pos[1])}
	}

	o.record = openRecord(*record, pos[0], pos[1], o.prefix, stderr)
	st, err := copyStore(ctx, storesvc.Wrap(src), storesvc.Wrap(dst), o)
	if st.classified && !o.dryRun && o.record != nil {
		if serr := o.record.save(); serr != nil {
			// The record only saves work: without it the next copy
			// compares contents instead.
			fmt.Fprintf(stderr, "zarrgate cp: warning: %v\n", serr)
		}
	}
	st.print(stdout, o)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("interrupted; run the same command again to resume: %w", err)
	}
	return err
}

type cpOptions struct {
	prefix   string // "" or a path ending with "/"
	workers  int
	del      bool
	dryRun   bool
	checksum bool
	verbose  bool
	out      io.Writer   // key lines (-v, --dry-run)
	progress io.Writer   // nil: no progress line
	record   *copyRecord // nil: nothing recorded, every key of equal size is compared by content
	outMu    sync.Mutex
}

// Why a key was copied, skipped or deleted: the words of the key lines.
const (
	whyNew       = "new"
	whySize      = "size differs"
	whyContent   = "content differs"
	whyGen       = "same generation"
	whySum       = "same SHA-256"
	whyAbsentSrc = "absent at source"
)

func (o *cpOptions) line(verb, why, key string) {
	o.outMu.Lock()
	defer o.outMu.Unlock()
	fmt.Fprintf(o.out, "%-6s %-16s %s\n", verb, why, key)
}

// cpStats counts what a copy did. Every source key falls in exactly one of
// copied*, skipped* and vanished; every destination key absent at the
// source in deleted or kept.
type cpStats struct {
	classified bool // listing and comparing finished: the record may be saved

	copiedNew, copiedSize, copiedContent atomic.Int64
	bytes                                atomic.Int64
	todo, todoBytes                      int64 // what is to be copied
	skippedGen, skippedSum               atomic.Int64
	vanished                             int64 // listed at the source, gone when looked at
	deleted, absent                      int64 // destination keys absent at the source: deleted, and all of them
}

func (s *cpStats) copied() int64 {
	return s.copiedNew.Load() + s.copiedSize.Load() + s.copiedContent.Load()
}

func (s *cpStats) print(w io.Writer, o *cpOptions) {
	var nNew, nSize, nContent, n, bytes int64
	copied := "copied"
	if o.dryRun {
		// Nothing was copied: the counts are of what would be.
		copied = "would copy"
		n, bytes = s.todo, s.todoBytes
		nNew, nSize, nContent = s.copiedNew.Load(), s.copiedSize.Load(), s.copiedContent.Load()
	} else {
		n, bytes = s.copied(), s.bytes.Load()
		nNew, nSize, nContent = s.copiedNew.Load(), s.copiedSize.Load(), s.copiedContent.Load()
	}
	fmt.Fprintf(w, "%s %s (%s)%s\n", copied, keysN(n), humanBytes(bytes),
		reasons(count{nNew, whyNew}, count{nSize, whySize}, count{nContent, whyContent}))
	if !o.dryRun && s.todo > n {
		fmt.Fprintf(w, "not copied %s (%s) the run did not reach\n", keysN(s.todo-n), humanBytes(s.todoBytes-bytes))
	}
	fmt.Fprintf(w, "skipped %s unchanged%s\n", keysN(s.skippedGen.Load()+s.skippedSum.Load()),
		reasons(count{s.skippedGen.Load(), whyGen + " as when last copied"}, count{s.skippedSum.Load(), whySum}))
	if s.vanished > 0 {
		fmt.Fprintf(w, "ignored %s removed from the source during the copy\n", keysN(s.vanished))
	}
	switch {
	case o.del && o.dryRun:
		fmt.Fprintf(w, "would delete %s absent at the source\n", keysN(s.absent))
	case o.del:
		fmt.Fprintf(w, "deleted %s absent at the source\n", keysN(s.deleted))
		if s.absent > s.deleted {
			fmt.Fprintf(w, "not deleted %s absent at the source the run did not reach\n", keysN(s.absent-s.deleted))
		}
	case s.absent > 0:
		fmt.Fprintf(w, "kept %s absent at the source (--delete removes them)\n", keysN(s.absent))
	}
	if o.dryRun {
		fmt.Fprintln(w, "dry run: nothing was changed")
	}
}

func keysN(n int64) string {
	if n == 1 {
		return "1 key"
	}
	return fmt.Sprintf("%d keys", n)
}

type count struct {
	n   int64
	why string
}

// reasons formats ": 3 new, 1 size differs", leaving out zero counts.
func reasons(cs ...count) string {
	var parts []string
	for _, c := range cs {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.why))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// keyStat is what a zero-length Get tells about a key: its size (-1: the
// key does not exist) and generation.
type keyStat struct {
	size int64
	gen  string
}

type copyJob struct {
	key  string
	size int64
	why  string
}

// copyStore makes dst hold a copy of every key of src under o.prefix.
//
// A key is copied when the destination lacks it, when the sizes differ, or
// when the contents differ. Contents are compared without reading them
// where possible: o.record remembers, for every key an earlier copy wrote
// or verified, the source generation it copied and the destination
// generation that produced. Generations change on every write (file store:
// inode, nanosecond mtime and size; S3: ETag plus a random token; zip:
// offset and CRC), so when both still match, the destination still holds
// what the source holds. Any other key of equal size on both sides is
// compared by SHA-256, streamed from both stores. Sizes alone would let a
// value rewritten at the same size (a chunk updated in place, a fixed-size
// metadata edit) keep its stale copy without a word.
//
// Every key is written atomically, so an interrupted copy resumes where it
// stopped: the keys it wrote are in the record (saved on interruption too),
// or, after a crash, compare equal by checksum.
func copyStore(ctx context.Context, src, dst *storesvc.Portable, o *cpOptions) (*cpStats, error) {
	st := &cpStats{}
	srcKeys, err := listKeys(ctx, src, o.prefix)
	if err != nil {
		return st, fmt.Errorf("list the source: %w", err)
	}
	dstKeys, err := listKeys(ctx, dst, o.prefix)
	if err != nil {
		return st, fmt.Errorf("list the destination: %w", err)
	}
	inDst := make(map[string]bool, len(dstKeys))
	for _, k := range dstKeys {
		inDst[k] = true
	}
	inSrc := make(map[string]bool, len(srcKeys))
	for _, k := range srcKeys {
		inSrc[k] = true
	}
	var absent []string
	for _, k := range dstKeys {
		if !inSrc[k] {
			absent = append(absent, k)
		}
	}
	st.absent = int64(len(absent))

	// Stat both sides. Stats are latency-bound (one round trip each to a
	// server or S3), so more run at once than copies.
	srcStats, err := statKeys(ctx, src, srcKeys, max(o.workers, 16))
	if err != nil {
		return st, err
	}
	both := make([]string, 0, len(srcKeys))
	for _, k := range srcKeys {
		if inDst[k] {
			both = append(both, k)
		}
	}
	dstStatsBoth, err := statKeys(ctx, dst, both, max(o.workers, 16))
	if err != nil {
		return st, err
	}
	dstStats := make(map[string]keyStat, len(both))
	for i, k := range both {
		dstStats[k] = dstStatsBoth[i]
	}

	var jobs []copyJob
	var compare []int // indices into srcKeys of keys of equal size to compare by content
	var compareBytes int64
	for i, k := range srcKeys {
		s := srcStats[i]
		d, ok := dstStats[k]
		switch {
		case s.size < 0: // removed since it was listed
			st.vanished++
		case !ok || d.size < 0:
			jobs = append(jobs, copyJob{k, s.size, whyNew})
		case s.size != d.size:
			jobs = append(jobs, copyJob{k, s.size, whySize})
		case !o.checksum && o.record.matches(k, s.gen, d.gen):
			st.skippedGen.Add(1)
			o.record.put(k, s.gen, d.gen)
			if o.verbose {
				o.line("skip", whyGen, k)
			}
		default:
			compare = append(compare, i)
			compareBytes += 2 * s.size
		}
	}

	// Compare the rest by content.
	if len(compare) > 0 {
		var mu sync.Mutex
		pr := startProgress(o.progress, "comparing", compareBytes)
		err = parallel(ctx, len(compare), o.workers, func(ctx context.Context, j int) error {
			k := srcKeys[compare[j]]
			same, sg, dg, err := sameContent(ctx, src, dst, k, &pr.done)
			if err != nil {
				return err
			}
			if same {
				st.skippedSum.Add(1)
				o.record.put(k, sg, dg)
				if o.verbose {
					o.line("skip", whySum, k)
				}
				return nil
			}
			mu.Lock()
			jobs = append(jobs, copyJob{k, srcStats[compare[j]].size, whyContent})
			mu.Unlock()
			return nil
		})
		pr.end()
		if err != nil {
			return st, err
		}
	}
	st.classified = true
	slices.SortFunc(jobs, func(a, b copyJob) int { return strings.Compare(a.key, b.key) })
	for _, j := range jobs {
		st.todo++
		st.todoBytes += j.size
	}
	slices.Sort(absent)

	if o.dryRun {
		for _, j := range jobs {
			st.countCopy(j.why)
			o.line("copy", j.why, j.key)
		}
		if o.del || o.verbose {
			verb := "keep"
			if o.del {
				verb = "delete"
			}
			for _, k := range absent {
				o.line(verb, whyAbsentSrc, k)
			}
		}
		return st, nil
	}

	// Copy, saving the record now and then, so that a crash (not an
	// interruption: that saves it anyway) costs at most a minute of
	// records, and the next run compares those keys by content.
	stopSaving := o.record.saveEvery(time.Minute)
	pr := startProgress(o.progress, "copying", st.todoBytes)
	err = parallel(ctx, len(jobs), o.workers, func(ctx context.Context, i int) error {
		j := jobs[i]
		sg, dg, n, err := copyKey(ctx, src, dst, j.key, &pr.done)
		if err != nil {
			return err
		}
		st.bytes.Add(n)
		st.countCopy(j.why)
		o.record.put(j.key, sg, dg)
		if o.verbose {
			o.line("copy", j.why, j.key)
		}
		return nil
	})
	pr.end()
	stopSaving()
	if err != nil {
		return st, err
	}

	// Delete after copying, so that an interrupted run leaves the
	// destination with more keys rather than fewer.
	if o.del {
		const batch = 1000
		for start := 0; start < len(absent); start += batch {
			b := absent[start:min(start+batch, len(absent))]
			if err := dst.EraseValues(ctx, b); err != nil {
				return st, fmt.Errorf("delete keys absent at the source: %w", err)
			}
			st.deleted += int64(len(b))
			if o.verbose {
				for _, k := range b {
					o.line("delete", whyAbsentSrc, k)
				}
			}
		}
	} else if o.verbose {
		for _, k := range absent {
			o.line("keep", whyAbsentSrc, k)
		}
	}
	return st, nil
}

func (s *cpStats) countCopy(why string) {
	switch why {
	case whyNew:
		s.copiedNew.Add(1)
	case whySize:
		s.copiedSize.Add(1)
	default:
		s.copiedContent.Add(1)
	}
}

func listKeys(ctx context.Context, s *storesvc.Portable, prefix string) ([]string, error) {
	var keys []string
	for k, err := range s.ListPrefix(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// statKeys reads the size and generation of each key; size -1 for a
// missing key.
func statKeys(ctx context.Context, s *storesvc.Portable, keys []string, workers int) ([]keyStat, error) {
	out := make([]keyStat, len(keys))
	err := parallel(ctx, len(keys), workers, func(ctx context.Context, i int) error {
		obj, err := s.Get(ctx, keys[i], storesvc.Bounded(0, 0))
		if errors.Is(err, storesvc.ErrNotFound) {
			out[i].size = -1
			return nil
		}
		if err != nil {
			return err
		}
		obj.Close()
		out[i] = keyStat{obj.Size, obj.Generation}
		return nil
	})
	return out, err
}

// sameContent compares the SHA-256 of key's value in both stores, reading
// both at once, in frames (never a whole value in memory). It returns the
// generations the two digests belong to.
func sameContent(ctx context.Context, src, dst *storesvc.Portable, key string, done *atomic.Int64) (same bool, srcGen, dstGen string, err error) {
	var sums [2][]byte
	var gens [2]string
	var errsOf [2]error
	var wg sync.WaitGroup
	for i, s := range []*storesvc.Portable{src, dst} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sums[i], gens[i], errsOf[i] = digest(ctx, s, key, done)
		}()
	}
	wg.Wait()
	if err := errors.Join(errsOf[0], errsOf[1]); err != nil {
		if errors.Is(err, storesvc.ErrNotFound) {
			// Removed on either side since the stat: not the same; the
			// copy sorts out which.
			return false, "", "", nil
		}
		return false, "", "", fmt.Errorf("compare %q: %w", key, err)
	}
	return string(sums[0]) == string(sums[1]), gens[0], gens[1], nil
}

func digest(ctx context.Context, s *storesvc.Portable, key string, done *atomic.Int64) ([]byte, string, error) {
	obj, err := s.Get(ctx, key, storesvc.ByteRange{})
	if err != nil {
		return nil, "", err
	}
	defer obj.Close()
	h := sha256.New()
	if _, err := storesvc.CopyContext(ctx, h, &countingReader{r: obj, n: done}); err != nil {
		return nil, "", err
	}
	return h.Sum(nil), obj.Generation, nil
}

// copyKey copies one value, streamed. It returns the generation of the
// source value it read, the generation of the destination value it wrote,
// and the number of bytes.
func copyKey(ctx context.Context, src, dst *storesvc.Portable, key string, done *atomic.Int64) (string, string, int64, error) {
	obj, err := src.Get(ctx, key, storesvc.ByteRange{})
	if err != nil {
		return "", "", 0, fmt.Errorf("copy %q: %w", key, err)
	}
	defer obj.Close()
	var n atomic.Int64
	cr := &countingReader{r: obj, n: &n, also: done}
	gen, err := dst.Set(ctx, key, cr, storesvc.Condition{})
	if err != nil {
		return "", "", 0, fmt.Errorf("copy %q: %w", key, err)
	}
	return obj.Generation, gen, n.Load(), nil
}

// parallel calls fn for 0..n-1 on up to workers goroutines. It stops at
// the first error, which it returns, or when ctx is done.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && int(next.Load()) < n {
		first = ctx.Err() // stopped before every index was done
	}
	return first
}

type countingReader struct {
	r    io.Reader
	n    *atomic.Int64
	also *atomic.Int64 // nil, or a second counter (the progress line's)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	if c.also != nil {
		c.also.Add(int64(n))
	}
	return n, err
}
