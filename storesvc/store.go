// Package storesvc is the store contract of zarrgate: the Zarr abstract
// store interface (Zarr v3 core.rst, "Abstract store interface") in Go,
// with the portable layer every caller goes through. Its conformance suite
// is package storesvc/storetest.
//
// A backend implements the small Store contract and, where it can do better
// than the generic fallbacks, the optional capability interfaces
// (PartialReader, PartialWriter, DirLister, BatchEraser, PrefixEraser); this
// package (and errs, for error codes) is all it needs to import, and
// storetest.Run checks it. Applications never call a backend directly: Wrap
// puts the portable layer in front of it, which validates keys, prefixes,
// ranges and conditions, refuses what the backend's Capabilities exclude,
// supplies the fallbacks, and gives every error a code (package errs).
//
// The package knows no transport. The gRPC StoreService that serves any
// Store is package storesvc/storeserver, and its client, package
// storesvc/remote, is itself a Store, indistinguishable from a local one.
package storesvc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"iter"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
)

// Sentinel errors of the store contract. Backends return errors that match
// these with errors.Is (usually via errs.New(errs.NotFound, ...)), and so do
// remote stores.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errs.NotFound
	// ErrInvalidKey: a key, prefix, range or condition is malformed.
	ErrInvalidKey = errs.InvalidArgument
	// ErrOutOfRange: a byte range lies past the end of the value.
	ErrOutOfRange = errs.OutOfRange
	// ErrPrecondition: a write condition does not hold, or the store is
	// read-only.
	ErrPrecondition = errs.FailedPrecondition
	// ErrUnsupported: the store lacks the capability the call needs.
	ErrUnsupported = errs.Unimplemented
)

// LocalReads reports whether reading s runs on this process's processors:
// copying bytes from memory or from the operating system's page cache (the
// file, memory and zip stores say so with a LocalReads method), rather
// than waiting on another process or host (a store worker, S3), which
// uses none. Portable layers pass the question on; a store that says
// nothing is taken to wait. The gateway's fair scheduler counts local
// reads among a call's work on the processors.
func LocalReads(s Store) bool {
	for {
		switch t := s.(type) {
		case interface{ LocalReads() bool }:
			return t.LocalReads()
		case interface{ Unwrap() Store }:
			s = t.Unwrap()
		default:
			return false
		}
	}
}

// Capabilities are the capability groups of the abstract store interface,
// plus the extensions zarrgate relies on.
type Capabilities struct {
	Readable          bool // Get, GetPartialValues
	Writable          bool // Set
	Listable          bool // ListPrefix, ListDir
	PartialWrites     bool // SetPartialValues
	ConditionalWrites bool // Condition on Set and Erase
	Erasable          bool // Erase, EraseValues, ErasePrefix
}

// Object is an open value, or the part of it a range selected. The caller
// must Close it. Reading it yields exactly Length bytes.
type Object struct {
	io.ReadCloser
	// Generation changes on every write of the key; see Condition.
	Generation string
	// Size is the size of the whole stored value.
	Size int64
	// Offset and Length locate the returned bytes within the value.
	Offset, Length int64
}

// VecReader is implemented by the ReadCloser of an Object that can read
// its bytes into several buffers at once (the file store: one preadv per
// up to 1024 buffers): ReadFullVec fills bufs in order with the object's
// next bytes, as io.ReadFull would each, and fails, with
// io.ErrUnexpectedEOF, if the object ends first.
type VecReader interface {
	ReadFullVec(bufs [][]byte) error
}

// Condition makes Set and Erase conditional. The check and the write are one
// atomic step, also between processes sharing a backend. The zero value
// writes unconditionally.
type Condition struct {
	// IfGenerationMatch, when not empty, writes only if the stored value has
	// this generation (as returned by Get or Set).
	IfGenerationMatch string
	// IfAbsent writes only if the key does not exist.
	IfAbsent bool
}

// IsZero reports whether the condition is unconditional.
func (c Condition) IsZero() bool { return c == Condition{} }

// KeyRange is a key and the range of its value to read.
type KeyRange struct {
	Key   string
	Range ByteRange
}

// PartialValue is one result of GetPartialValues. A missing key has Found
// false and nil Data.
type PartialValue struct {
	Data  []byte
	Found bool
	// Generation of the value the range was read from, so that a caller
	// combining several ranges (a shard index and its chunks) can tell
	// whether they come from one version of the value.
	Generation string
	// pooled: Data is a whole buffer from zarrgate's buffer pool that
	// belongs to the caller alone (see Release).
	pooled bool
}

// Pooled reports whether Data is a recycled buffer that Release hands back
// for reuse: a caller that lets Data (or slices of it) outlive the call
// must then release it only after their last use, and may otherwise skip
// tracking those uses.
func (v *PartialValue) Pooled() bool { return v.pooled }

// Release hands Data's buffer back for reuse once the caller is done with
// it and with every slice of it; it clears Data, so that a use after
// Release shows as an empty value rather than someone else's bytes. Values
// whose buffer is not pooled are left as they are. Releasing is optional
// (a dropped value is garbage-collected like any slice) and safe to repeat
// on the same variable; but copies of a PartialValue share one buffer, so
// release it through one of them only.
func (v *PartialValue) Release() {
	if !v.pooled {
		return
	}
	bufpool.Put(v.Data)
	v.Data, v.pooled = nil, false
}

// PartialWrite writes Data into the value of Key at Offset.
type PartialWrite struct {
	Key    string
	Offset int64
	Data   []byte
}

// DirEntry is one result of ListDir: a key directly under the prefix, or a
// child prefix (ending with "/") that holds further keys.
type DirEntry struct {
	// Path is the full key, or the full prefix including the trailing "/".
	Path     string
	IsPrefix bool
}

// Store is the contract every backend implements. Implementations are safe
// for concurrent use. The portable layer (Wrap) has validated every key,
// prefix, range and condition before a backend sees it, so backends need not
// repeat those checks.
type Store interface {
	// Capabilities reports what the store can do. It does not change over
	// the life of the store.
	Capabilities() Capabilities

	// Get opens the value stored under key, restricted to r. A missing key
	// returns an error matching ErrNotFound; a range past the end of the
	// value one matching ErrOutOfRange. The returned object reads a
	// consistent snapshot: a concurrent Set never makes it return a mix of
	// old and new bytes.
	Get(ctx context.Context, key string, r ByteRange) (*Object, error)

	// Set stores the bytes read from value under key, atomically: readers see
	// the old value or the new one, never a torn one. If value fails or ctx is
	// cancelled before value is exhausted, nothing is stored. It returns the
	// new generation. A condition that does not hold returns an error matching
	// ErrPrecondition and stores nothing.
	Set(ctx context.Context, key string, value io.Reader, cond Condition) (generation string, err error)

	// Erase removes key. Erasing a missing key succeeds, unless
	// cond.IfGenerationMatch is set.
	Erase(ctx context.Context, key string, cond Condition) error

	// ListPrefix yields every key starting with prefix ("" for all keys),
	// each once, in no particular order. Iteration stops at the first error.
	ListPrefix(ctx context.Context, prefix string) iter.Seq2[string, error]

	// Close releases the store's resources.
	Close() error
}

// PartialReader is implemented by stores that read many ranges faster than
// one Get per range.
type PartialReader interface {
	// GetPartialValues returns one result per request, in request order.
	// Missing keys give results with Found false, not an error.
	GetPartialValues(ctx context.Context, reqs []KeyRange) ([]PartialValue, error)
}

// PartialWriter is implemented by stores that can write into existing
// values. Each key's writes are applied atomically.
type PartialWriter interface {
	// SetPartialValues applies the writes. A write to a missing key returns
	// ErrNotFound; an offset past the end of the value ErrOutOfRange.
	SetPartialValues(ctx context.Context, writes []PartialWrite) error
}

// DirLister is implemented by stores that list one level of keys faster than
// by listing every key below the prefix.
type DirLister interface {
	// ListDir yields the keys directly under prefix and the child prefixes,
	// each once, in no particular order.
	ListDir(ctx context.Context, prefix string) iter.Seq2[DirEntry, error]
}

// BatchEraser is implemented by stores that erase many keys in one request.
type BatchEraser interface {
	// EraseValues removes keys; missing keys are ignored.
	EraseValues(ctx context.Context, keys []string) error
}

// PrefixEraser is implemented by stores that erase a prefix faster than key
// by key.
type PrefixEraser interface {
	// ErasePrefix removes every key starting with prefix.
	ErasePrefix(ctx context.Context, prefix string) error
}

// FullStore is a Store with every optional capability interface: what Wrap
// and the remote client return.
type FullStore interface {
	Store
	PartialReader
	PartialWriter
	DirLister
	BatchEraser
	PrefixEraser
}

// ReadAll reads the whole value of key.
func ReadAll(ctx context.Context, s Store, key string) ([]byte, string, error) {
	obj, err := s.Get(ctx, key, ByteRange{})
	if err != nil {
		return nil, "", err
	}
	defer obj.Close()
	buf := make([]byte, obj.Length)
	if _, err := io.ReadFull(obj, buf); err != nil {
		return nil, "", fmt.Errorf("read %q: %w", key, err)
	}
	return buf, obj.Generation, nil
}

// copyStep is the step of CopyContext: large enough to keep the copy cheap,
// small enough that a cancelled copy stops promptly.
const copyStep = 1 << 20

// copyWhole: a value in memory up to this size is written in one step.
const copyWhole = 4 * copyStep

// CopyContext copies src to dst in copyStep (1 MiB) steps, checking ctx between
// steps, so that a cancelled write stops promptly; a *bytes.Reader of at most
// copyWhole bytes is written from its own bytes in one step. It returns src's
// or dst's error as is.
func CopyContext(ctx context.Context, dst io.Writer, src io.Reader) (int64, error) {
	if r, ok := src.(*bytes.Reader); ok && r.Len() <= copyWhole {
		// A value in memory (the gateway's encoded chunks) is written
		// from where it is, in one step, not copied through the buffer
		// first (a copy of every value: 0.6 % of a whole-array write's
		// CPU in the gateway's profile).
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return r.WriteTo(dst)
	}
	// The buffer is reused: allocating (and zeroing) 1 MiB per value
	// cost a whole-array write 14 % of its CPU time.
	buf := bufpool.Get(copyStep)
	defer bufpool.Put(buf)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, err := io.ReadFull(src, buf)
		if m > 0 {
			w, werr := dst.Write(buf[:m])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
