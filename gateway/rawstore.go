package gateway

import (
	"context"
	"io"

	"github.com/zarrgate/zarrgate/storesvc"
)

// RawStore is the gateway's store for raw access beside the array API (the
// StoreService pass-through, so that stub clients and other Zarr libraries
// can use the store through the gateway): writes through it drop what they
// invalidate of the gateway's cached metadata and shard indexes, as writes
// through the gateway itself do.
func (g *Gateway) RawStore() storesvc.Store { return &invalidating{Portable: g.store, c: g.cache} }

// invalidating drops, after each write, the cache entries under the
// written keys (metaCache.dropKey, dropPrefix). Dropping after the write
// (even a failed one, which may have happened) leaves a read racing with
// it no stale entry beyond the cache's TTL.
type invalidating struct {
	*storesvc.Portable
	c *metaCache
}

func (s *invalidating) Set(ctx context.Context, key string, v io.Reader, c storesvc.Condition) (string, error) {
	defer s.c.dropKey(key)
	return s.Portable.Set(ctx, key, v, c)
}

func (s *invalidating) SetPartialValues(ctx context.Context, w []storesvc.PartialWrite) error {
	defer func() {
		for _, pw := range w {
			s.c.dropKey(pw.Key)
		}
	}()
	return s.Portable.SetPartialValues(ctx, w)
}

func (s *invalidating) Erase(ctx context.Context, key string, c storesvc.Condition) error {
	defer s.c.dropKey(key)
	return s.Portable.Erase(ctx, key, c)
}

func (s *invalidating) EraseValues(ctx context.Context, keys []string) error {
	defer func() {
		for _, k := range keys {
			s.c.dropKey(k)
		}
	}()
	return s.Portable.EraseValues(ctx, keys)
}

func (s *invalidating) ErasePrefix(ctx context.Context, prefix string) error {
	defer s.c.dropPrefix(prefix)
	return s.Portable.ErasePrefix(ctx, prefix)
}
