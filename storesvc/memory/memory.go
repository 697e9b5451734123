// Package memory is an in-memory store: every capability, for tests and for
// caching small hierarchies. Values are immutable once stored, so readers
// never copy them and never see a torn write.
package memory

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

type entry struct {
	data []byte
	gen  string
}

// Store is an in-memory store.
type Store struct {
	mu   sync.RWMutex
	m    map[string]entry
	next atomic.Uint64
	// epoch makes generations unique across instances: a store made anew
	// (a restarted server) never repeats one an earlier instance handed
	// out, so a generation recorded by a client (zarrgate cp) cannot match
	// different data.
	epoch string
}

var (
	_ storesvc.Store         = (*Store)(nil)
	_ storesvc.PartialWriter = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	var b [6]byte
	rand.Read(b[:])
	return &Store{m: make(map[string]entry), epoch: hex.EncodeToString(b[:]) + "-"}
}

func (s *Store) newGen() string { return s.epoch + strconv.FormatUint(s.next.Add(1), 36) }

// LocalReads says reading the store runs on this process's processors:
// they copy from this process's memory (storesvc.LocalReads).
func (s *Store) LocalReads() bool { return true }

// Capabilities implements storesvc.Store: everything.
func (s *Store) Capabilities() storesvc.Capabilities {
	return storesvc.Capabilities{Readable: true, Writable: true, Listable: true, PartialWrites: true, ConditionalWrites: true, Erasable: true}
}

// Get implements storesvc.Store.
func (s *Store) Get(_ context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	s.mu.RLock()
	e, ok := s.m[key]
	s.mu.RUnlock()
	if !ok {
		return nil, errs.New(errs.NotFound, "key %q not found", key)
	}
	off, n, err := r.Resolve(int64(len(e.data)))
	if err != nil {
		return nil, errs.New(errs.OutOfRange, "get %q: %v", key, err)
	}
	return &storesvc.Object{
		ReadCloser: io.NopCloser(bytes.NewReader(e.data[off : off+n])),
		Generation: e.gen, Size: int64(len(e.data)), Offset: off, Length: n,
	}, nil
}

// Set implements storesvc.Store.
func (s *Store) Set(ctx context.Context, key string, value io.Reader, cond storesvc.Condition) (string, error) {
	data, err := io.ReadAll(value)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := check(key, s.m, cond); err != nil {
		return "", err
	}
	gen := s.newGen()
	s.m[key] = entry{data: data, gen: gen}
	return gen, nil
}

func check(key string, m map[string]entry, cond storesvc.Condition) error {
	e, ok := m[key]
	switch {
	case cond.IfAbsent && ok:
		return errs.New(errs.FailedPrecondition, "key %q already exists (generation %s)", key, e.gen)
	case cond.IfGenerationMatch != "" && !ok:
		return errs.New(errs.FailedPrecondition, "key %q does not exist, expected generation %s", key, cond.IfGenerationMatch)
	case cond.IfGenerationMatch != "" && e.gen != cond.IfGenerationMatch:
		return errs.New(errs.FailedPrecondition, "key %q has generation %s, expected %s", key, e.gen, cond.IfGenerationMatch)
	}
	return nil
}

// SetPartialValues implements storesvc.PartialWriter.
func (s *Store) SetPartialValues(ctx context.Context, writes []storesvc.PartialWrite) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	groups := storesvc.GroupWrites(writes)
	patched := make(map[string][]byte, len(groups))
	for key, ws := range groups {
		e, ok := s.m[key]
		if !ok {
			return errs.New(errs.NotFound, "set_partial_values: key %q not found", key)
		}
		v, err := storesvc.Patch(key, e.data, ws)
		if err != nil {
			return err
		}
		patched[key] = v
	}
	for key, v := range patched {
		s.m[key] = entry{data: v, gen: s.newGen()}
	}
	return nil
}

// Erase implements storesvc.Store.
func (s *Store) Erase(_ context.Context, key string, cond storesvc.Condition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := check(key, s.m, cond); err != nil {
		return err
	}
	delete(s.m, key)
	return nil
}

// ListPrefix implements storesvc.Store. It yields a sorted snapshot.
func (s *Store) ListPrefix(_ context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		s.mu.RLock()
		keys := make([]string, 0)
		for k := range s.m {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		s.mu.RUnlock()
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, nil) {
				return
			}
		}
	}
}

// Close implements storesvc.Store.
func (s *Store) Close() error { return nil }
