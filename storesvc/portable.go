package storesvc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"math/rand/v2"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
)

// Portable is the layer in front of every backend: it validates input,
// enforces capabilities and read-only mode, and supplies fallbacks for the
// optional interfaces a backend lacks. It implements FullStore.
type Portable struct {
	s        Store
	caps     Capabilities
	readOnly bool
	fanout   int
	obs      Observer // nil: nobody observes (WithObserver)
}

var _ FullStore = (*Portable)(nil)

// Option configures Wrap.
type Option func(*Portable)

// ReadOnly makes every write fail with ErrPrecondition.
func ReadOnly() Option { return func(p *Portable) { p.readOnly = true } }

// WithFanout sets how many Gets the GetPartialValues fallback runs at once
// (default 16).
func WithFanout(n int) Option {
	return func(p *Portable) {
		if n > 0 {
			p.fanout = n
		}
	}
}

// maxPartialWriteAttempts bounds the conditional read-modify-write fallback
// of SetPartialValues under contention.
const maxPartialWriteAttempts = 64

// Wrap returns the portable layer over s. Wrapping a *Portable without
// options returns it unchanged.
func Wrap(s Store, opts ...Option) *Portable {
	if p, ok := s.(*Portable); ok && len(opts) == 0 {
		return p
	}
	p := &Portable{s: s, fanout: 16}
	for _, o := range opts {
		o(p)
	}
	c := s.Capabilities()
	if p.readOnly {
		c.Writable, c.PartialWrites, c.Erasable, c.ConditionalWrites = false, false, false, false
	}
	if _, ok := s.(PartialWriter); !ok {
		// The fallback is a read-modify-write conditioned on the generation.
		c.PartialWrites = c.Writable && c.Readable && c.ConditionalWrites
	}
	p.caps = c
	return p
}

// Unwrap returns the backend behind the portable layer.
func (p *Portable) Unwrap() Store { return p.s }

// LocalReads is the backend's answer (see the function LocalReads).
func (p *Portable) LocalReads() bool { return LocalReads(p.s) }

// Capabilities implements Store.
func (p *Portable) Capabilities() Capabilities { return p.caps }

func (p *Portable) checkReadable() error {
	if !p.caps.Readable {
		return errs.New(errs.Unimplemented, "store is not readable")
	}
	return nil
}

func (p *Portable) checkWritable(op string) error {
	if p.readOnly || !p.caps.Writable {
		return errs.New(errs.FailedPrecondition, "%s: store is read-only", op)
	}
	return nil
}

func (p *Portable) checkErasable(op string) error {
	if err := p.checkWritable(op); err != nil {
		return err
	}
	if !p.caps.Erasable {
		return errs.New(errs.Unimplemented, "%s: store cannot erase values", op)
	}
	return nil
}

func (p *Portable) checkCondition(op, key string, c Condition) error {
	if c.IsZero() {
		return nil
	}
	if c.IfAbsent && c.IfGenerationMatch != "" {
		return errs.New(errs.InvalidArgument, "%s %q: if_absent and if_generation_match are exclusive", op, key)
	}
	if !p.caps.ConditionalWrites {
		return errs.New(errs.Unimplemented, "%s %q: store does not support conditional writes", op, key)
	}
	return nil
}

func (p *Portable) checkListable() error {
	if !p.caps.Listable {
		return errs.New(errs.Unimplemented, "store is not listable")
	}
	return nil
}

// Get implements Store.
func (p *Portable) Get(ctx context.Context, key string, r ByteRange) (*Object, error) {
	if err := p.checkReadable(); err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := p.now()
	obj, err := p.s.Get(ctx, key, r)
	if p.obs != nil {
		var n int64
		if err == nil {
			n = obj.Length
		}
		p.observe(OpGet, start, n, 0, err)
	}
	return obj, err
}

// GetPartialValues implements PartialReader. Without a backend
// implementation it runs up to the fanout of Gets at once.
func (p *Portable) GetPartialValues(ctx context.Context, reqs []KeyRange) ([]PartialValue, error) {
	return p.GetPartialValuesMax(ctx, reqs, 0)
}

// GetPartialValuesMax is GetPartialValues for a caller that knows how
// large a value can sensibly be (a chunk, a metadata document): a value
// (or range) over max bytes is refused with DataLoss naming the key —
// before it is read where the backend has no batch read of its own (file,
// the common case), after it where it has (those hold their values in
// memory, or are bounded by gRPC's message size). 0 means no limit.
func (p *Portable) GetPartialValuesMax(ctx context.Context, reqs []KeyRange, max int64) ([]PartialValue, error) {
	if p.obs == nil {
		return p.getPartialValuesMax(ctx, reqs, max)
	}
	start := time.Now()
	vals, err := p.getPartialValuesMax(ctx, reqs, max)
	var n int64
	for _, v := range vals {
		n += int64(len(v.Data))
	}
	p.observe(OpGetPartialValues, start, n, 0, err)
	return vals, err
}

func (p *Portable) getPartialValuesMax(ctx context.Context, reqs []KeyRange, max int64) ([]PartialValue, error) {
	if err := p.checkReadable(); err != nil {
		return nil, err
	}
	for _, r := range reqs {
		if err := ValidateKey(r.Key); err != nil {
			return nil, err
		}
		if err := r.Range.Validate(); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pr, ok := p.s.(PartialReader); ok {
		vals, err := pr.GetPartialValues(ctx, reqs)
		if err == nil && max > 0 {
			for i, v := range vals {
				if int64(len(v.Data)) > max {
					return nil, tooLarge(reqs[i].Key, int64(len(v.Data)), max)
				}
			}
		}
		return vals, err
	}
	out := make([]PartialValue, len(reqs))
	read := func(ctx context.Context, i int) error {
		data, gen, err := readRange(ctx, p.s, reqs[i], max)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		out[i] = PartialValue{Data: data, Found: true, Generation: gen, pooled: true}
		return nil
	}
	if len(reqs) == 1 {
		// One value (a small read's chunk, a shard index): read on the
		// caller's goroutine, no handoff to another and back.
		if err := read(ctx, 0); err != nil {
			return nil, err
		}
		return out, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.fanout)
	for i := range reqs {
		g.Go(func() error { return read(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		for i := range out { // the values read before the error
			out[i].Release()
		}
		return nil, err
	}
	return out, nil
}

func tooLarge(key string, n, max int64) error {
	return errs.New(errs.DataLoss, "%q holds %d bytes, more than any value stored there can (%d)", key, n, max)
}

func readRange(ctx context.Context, s Store, r KeyRange, max int64) ([]byte, string, error) {
	obj, err := s.Get(ctx, r.Key, r.Range)
	if err != nil {
		return nil, "", err
	}
	defer obj.Close()
	if max > 0 && obj.Length > max {
		return nil, "", tooLarge(r.Key, obj.Length, max)
	}
	buf := bufpool.Get(int(obj.Length))
	if _, err := io.ReadFull(obj, buf); err != nil {
		bufpool.Put(buf)
		return nil, "", err
	}
	return buf, obj.Generation, nil
}

// Set implements Store.
func (p *Portable) Set(ctx context.Context, key string, value io.Reader, cond Condition) (string, error) {
	if err := p.checkWritable("set"); err != nil {
		return "", err
	}
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if err := p.checkCondition("set", key, cond); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if p.obs == nil {
		return p.s.Set(ctx, key, value, cond)
	}
	start, cr := time.Now(), &countingReader{r: value}
	gen, err := p.s.Set(ctx, key, cr, cond)
	p.observe(OpSet, start, 0, cr.n, err)
	return gen, err
}

// SetPartialValues implements PartialWriter. Without a backend
// implementation it reads each value with its generation, patches it and
// writes it back conditioned on that generation, retrying on conflict.
func (p *Portable) SetPartialValues(ctx context.Context, writes []PartialWrite) error {
	if err := p.checkWritable("set_partial_values"); err != nil {
		return err
	}
	if !p.caps.PartialWrites {
		return errs.New(errs.Unimplemented, "set_partial_values: store does not support partial writes")
	}
	if err := CheckPartialWrites(writes); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.obs == nil {
		return p.setPartialValues(ctx, writes)
	}
	start := time.Now()
	err := p.setPartialValues(ctx, writes)
	var n int64
	for _, w := range writes {
		n += int64(len(w.Data))
	}
	p.observe(OpSetPartialValues, start, 0, n, err)
	return err
}

func (p *Portable) setPartialValues(ctx context.Context, writes []PartialWrite) error {
	if pw, ok := p.s.(PartialWriter); ok {
		return pw.SetPartialValues(ctx, writes)
	}
	for key, ws := range GroupWrites(writes) {
		if err := p.patchConditionally(ctx, key, ws); err != nil {
			return err
		}
	}
	return nil
}

func (p *Portable) patchConditionally(ctx context.Context, key string, ws []PartialWrite) error {
	backoff := time.Millisecond
	for attempt := range maxPartialWriteAttempts {
		if attempt > 0 {
			// Jittered exponential backoff, so contending writers spread out.
			select {
			case <-time.After(backoff/2 + rand.N(backoff)):
			case <-ctx.Done():
				return ctx.Err()
			}
			backoff = min(2*backoff, 200*time.Millisecond)
		}
		old, gen, err := ReadAll(ctx, p.s, key)
		if err != nil {
			return err
		}
		value, err := Patch(key, old, ws)
		if err != nil {
			return err
		}
		_, err = p.s.Set(ctx, key, bytes.NewReader(value), Condition{IfGenerationMatch: gen})
		if !errors.Is(err, ErrPrecondition) {
			return err
		}
	}
	return errs.New(errs.Aborted, "set_partial_values %q: value kept changing, gave up after %d attempts", key, maxPartialWriteAttempts)
}

// CheckPartialWrites validates keys and offsets, and rejects overlapping
// writes to one key.
func CheckPartialWrites(writes []PartialWrite) error {
	for _, w := range writes {
		if err := ValidateKey(w.Key); err != nil {
			return err
		}
		if w.Offset < 0 {
			return errs.New(errs.InvalidArgument, "set_partial_values %q: negative offset %d", w.Key, w.Offset)
		}
	}
	for key, ws := range GroupWrites(writes) {
		for i := 1; i < len(ws); i++ {
			if ws[i-1].Offset+int64(len(ws[i-1].Data)) > ws[i].Offset {
				return errs.New(errs.InvalidArgument, "set_partial_values %q: writes at %d and %d overlap", key, ws[i-1].Offset, ws[i].Offset)
			}
		}
	}
	return nil
}

// GroupWrites groups writes by key, each group sorted by offset.
func GroupWrites(writes []PartialWrite) map[string][]PartialWrite {
	m := make(map[string][]PartialWrite)
	for _, w := range writes {
		m[w.Key] = append(m[w.Key], w)
	}
	for _, ws := range m {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Offset < ws[j].Offset })
	}
	return m
}

// Patch applies writes (sorted by offset, as GroupWrites returns them) to a
// copy of value. A write may extend the value but must start within it.
func Patch(key string, value []byte, writes []PartialWrite) ([]byte, error) {
	size := int64(len(value))
	for _, w := range writes {
		if w.Offset > size {
			return nil, errs.New(errs.OutOfRange, "set_partial_values %q: offset %d is past the end of the %d-byte value", key, w.Offset, size)
		}
		size = max(size, w.Offset+int64(len(w.Data)))
	}
	out := make([]byte, size)
	copy(out, value)
	for _, w := range writes {
		copy(out[w.Offset:], w.Data)
	}
	return out, nil
}

// Erase implements Store.
func (p *Portable) Erase(ctx context.Context, key string, cond Condition) error {
	if err := p.checkErasable("erase"); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	if cond.IfAbsent {
		return errs.New(errs.InvalidArgument, "erase %q: if_absent makes no sense for erase", key)
	}
	if err := p.checkCondition("erase", key, cond); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := p.now()
	err := p.s.Erase(ctx, key, cond)
	p.observe(OpErase, start, 0, 0, err)
	return err
}

// EraseValues implements BatchEraser.
func (p *Portable) EraseValues(ctx context.Context, keys []string) error {
	if err := p.checkErasable("erase_values"); err != nil {
		return err
	}
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := p.now()
	err := p.eraseValues(ctx, keys)
	p.observe(OpEraseValues, start, 0, 0, err)
	return err
}

func (p *Portable) eraseValues(ctx context.Context, keys []string) error {
	if be, ok := p.s.(BatchEraser); ok {
		return be.EraseValues(ctx, keys)
	}
	for _, k := range keys {
		if err := p.s.Erase(ctx, k, Condition{}); err != nil {
			return err
		}
	}
	return nil
}

// ErasePrefix implements PrefixEraser. Without a backend implementation it
// lists the prefix and erases in batches.
func (p *Portable) ErasePrefix(ctx context.Context, prefix string) error {
	if err := p.checkErasable("erase_prefix"); err != nil {
		return err
	}
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := p.now()
	err := p.erasePrefix(ctx, prefix)
	p.observe(OpErasePrefix, start, 0, 0, err)
	return err
}

func (p *Portable) erasePrefix(ctx context.Context, prefix string) error {
	if pe, ok := p.s.(PrefixEraser); ok {
		return pe.ErasePrefix(ctx, prefix)
	}
	const batch = 1000
	var keys []string
	for k, err := range p.s.ListPrefix(ctx, prefix) {
		if err != nil {
			return err
		}
		keys = append(keys, k)
	}
	for len(keys) > 0 {
		n := min(batch, len(keys))
		if err := p.eraseValues(ctx, keys[:n]); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// ListPrefix implements Store.
func (p *Portable) ListPrefix(ctx context.Context, prefix string) iter.Seq2[string, error] {
	if err := p.checkListable(); err != nil {
		return failSeq[string](err)
	}
	if err := ValidatePrefix(prefix); err != nil {
		return failSeq[string](err)
	}
	return observeSeq(p, OpListPrefix, p.s.ListPrefix(ctx, prefix))
}

// ListDir implements DirLister. Without a backend implementation it lists
// every key under the prefix and folds deeper keys into child prefixes.
func (p *Portable) ListDir(ctx context.Context, prefix string) iter.Seq2[DirEntry, error] {
	if err := p.checkListable(); err != nil {
		return failSeq[DirEntry](err)
	}
	if err := ValidatePrefix(prefix); err != nil {
		return failSeq[DirEntry](err)
	}
	return observeSeq(p, OpListDir, p.listDir(ctx, prefix))
}

func (p *Portable) listDir(ctx context.Context, prefix string) iter.Seq2[DirEntry, error] {
	if dl, ok := p.s.(DirLister); ok {
		return dl.ListDir(ctx, prefix)
	}
	return func(yield func(DirEntry, error) bool) {
		seen := make(map[string]bool)
		for k, err := range p.s.ListPrefix(ctx, prefix) {
			if err != nil {
				yield(DirEntry{}, err)
				return
			}
			e := DirEntryOf(prefix, k)
			if e.IsPrefix {
				if seen[e.Path] {
					continue
				}
				seen[e.Path] = true
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

// DirEntryOf returns what key, found under prefix, contributes to a
// ListDir of prefix: the key itself, or its child prefix.
func DirEntryOf(prefix, key string) DirEntry {
	rest := key[len(prefix):]
	for i := 0; i < len(rest); i++ {
		if rest[i] == '/' {
			return DirEntry{Path: prefix + rest[:i+1], IsPrefix: true}
		}
	}
	return DirEntry{Path: key}
}

// Close implements Store.
func (p *Portable) Close() error { return p.s.Close() }

func failSeq[T any](err error) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		yield(zero, err)
	}
}

// observeSeq tells p's observer of a listing once its iteration ends: the
// time from its start to the last entry taken (including the caller's
// time between entries), and the error that ended it.
func observeSeq[T any](p *Portable, op Op, seq iter.Seq2[T, error]) iter.Seq2[T, error] {
	if p.obs == nil {
		return seq
	}
	return func(yield func(T, error) bool) {
		start := time.Now()
		var err error
		for v, e := range seq {
			if e != nil {
				err = e
			}
			if !yield(v, e) {
				break
			}
		}
		p.observe(op, start, 0, 0, err)
	}
}
