package gateway

import (
	"path"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/zarrgate/zarrgate/zarr"
)

// Bounds of a gateway's metadata cache (nodes and shard indexes). The
// cache is outside the memory budget (docs/limits.md), so it has a fixed
// worst case of its own: at most cacheMaxEntries entries weighing at most
// cacheMaxBytes together, where an entry weighs its payload (a node: twice
// the bytes of its metadata documents, and for an array the fill pattern
// its layout holds once built, up to 1 MiB, 2 MiB for variable-length
// types; a shard index: 16 bytes per inner chunk) plus cacheEntryOverhead
// and its key. An entry heavier than a
// quarter of cacheMaxBytes is not cached at all (a shard index of a million
// inner chunks or more, a node with more than 8 MiB of metadata): it is
// read from the store on every call, as with MetadataTTL < 0. The weights
// are estimates of the heap held (cacheEntryOverhead: the LRU's entry, its
// two maps' and the tree's, measured at about 500 bytes): 100 000 small
// shard indexes hold about 50 MiB of heap, 64 MiB of large ones about 64
// MiB; with what the weights leave out of a node (its parsed metadata and
// codecs beyond twice their documents), about 80 MiB at most.
const (
	cacheMaxEntries    = 100_000
	cacheMaxBytes      = 64 << 20
	cacheEntryOverhead = 512
)

// cacheKind tells a node entry from a shard-index entry.
type cacheKind uint8

const (
	kindNode  cacheKind = iota // key: the node's path
	kindIndex                  // key: the shard's store key
)

type cacheKey struct {
	kind cacheKind
	key  string
}

// cacheVal is a cached node or shard index, with the node it belongs to
// (the node itself, or the array whose shard it is) and its weight.
type cacheVal struct {
	owner   string
	weight  int64
	node    *node
	index   *shardIdx
	expires time.Time // zero: never
}

// metaCache caches the gateway's node metadata and shard indexes: an LRU
// bounded in entries and bytes (hashicorp's golang-lru) whose entries
// expire after MetadataTTL, plus a tree of the cached entries by node
// path, so that a write drops exactly the entries under the written key's
// node (its metadata and its shard indexes, or one shard's index, or
// everything under an erased prefix) without scanning the cache.
//
// Lookups (get) take only the LRU's lock. Puts and drops are serialized by
// opMu, so that the tree and the LRU hold the same entries whenever opMu
// is free: a put enters the tree before the LRU, a drop removes from the
// LRU, whose eviction callback (also called when a lookup finds an entry
// expired and removes it) removes from the tree under mu. Locks nest
// opMu → the LRU's → mu; nothing calls the LRU while holding mu.
//
// A nil *metaCache (MetadataTTL < 0) caches nothing.
//
// Expired entries are removed when a lookup finds them, or evicted as the
// least recently used: golang-lru's expirable.LRU would remove them sooner,
// but runs a goroutine per cache that never ends (v2.0.7), one per Gateway,
// and the bounds hold either way.
type metaCache struct {
	lru       *lru.Cache[cacheKey, cacheVal]
	ttl       time.Duration
	maxBytes  int64
	maxWeight int64 // of one entry
	opMu      sync.Mutex
	mu        sync.Mutex // guards root and bytes
	root      *cacheNode
	bytes     int64
}

// cacheNode is a node path in the tree of cached entries: whether its
// metadata is cached, the keys of its cached shard indexes, and the paths
// below it that have cached entries. Empty tree nodes are removed.
type cacheNode struct {
	parent   *cacheNode
	name     string
	children map[string]*cacheNode
	meta     bool
	shards   map[string]struct{}
}

func (t *cacheNode) empty() bool { return !t.meta && len(t.shards) == 0 && len(t.children) == 0 }

// newMetaCache returns a cache of entries living ttl (nil if ttl < 0, 0
// meaning never expiring), at most maxEntries of them weighing at most
// maxBytes.
func newMetaCache(ttl time.Duration, maxEntries int, maxBytes int64) *metaCache {
	if ttl < 0 {
		return nil
	}
	c := &metaCache{ttl: ttl, maxBytes: maxBytes, maxWeight: maxBytes / 4, root: &cacheNode{}}
	var err error
	if c.lru, err = lru.NewWithEvict(maxEntries, c.evicted); err != nil {
		panic(err) // only for maxEntries <= 0
	}
	return c
}

// get returns the live entry at k, removing it if it has expired.
func (c *metaCache) get(k cacheKey) (cacheVal, bool) {
	v, ok := c.lru.Get(k)
	if ok && !v.expires.IsZero() && time.Now().After(v.expires) {
		// A put of a fresh value may have come in between: removing it
		// costs a miss, never a stale read.
		c.lru.Remove(k)
		return cacheVal{}, false
	}
	return v, ok
}

// node returns the cached node at path.
func (c *metaCache) node(path string) (*node, bool) {
	if c == nil {
		return nil, false
	}
	v, ok := c.get(cacheKey{kindNode, path})
	return v.node, ok
}

// index returns the cached index of the shard at key.
func (c *metaCache) index(key string) (*shardIdx, bool) {
	if c == nil {
		return nil, false
	}
	v, ok := c.get(cacheKey{kindIndex, key})
	return v.index, ok
}

// putNode caches n, read from the store.
func (c *metaCache) putNode(n *node) {
	if c == nil {
		return
	}
	c.put(cacheKey{kindNode, n.path}, cacheVal{owner: n.path, weight: n.weight(), node: n})
}

// weight is what a cached node holds: its parsed metadata, and an array's
// layout, once built, with its fill pattern (newFill: whole elements up to
// fillPatternBytes, with as many offsets for variable-length types;
// bounded here by the shape of a stored object, larger than or equal to
// the layout's unit).
func (n *node) weight() int64 {
	w := 2 * n.docBytes
	if a := n.array; a != nil {
		elems := zarr.SaturatingProduct(a.ChunkShape)
		if a.DataType.VariableLength() {
			w += min(zarr.SaturatingProduct([]int64{elems, int64(len(a.FillValue)) + 8}), 2*fillPatternBytes+8)
		} else {
			w += min(zarr.SaturatingProduct([]int64{elems, int64(a.DataType.Size)}), fillPatternBytes)
		}
	}
	return w
}

// putIndex caches the index of the shard at key of the array at owner.
func (c *metaCache) putIndex(owner, key string, idx *shardIdx) {
	if c == nil {
		return
	}
	c.put(cacheKey{kindIndex, key}, cacheVal{owner: owner, weight: 16 * int64(len(idx.entries)), index: idx})
}

func (c *metaCache) put(k cacheKey, v cacheVal) {
	v.weight += cacheEntryOverhead + 2*int64(len(k.key)+len(v.owner))
	if c.ttl > 0 {
		v.expires = time.Now().Add(c.ttl)
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	// An older value goes first, through the callback, so that the
	// tree and the byte count follow.
	c.lru.Remove(k)
	if v.weight > c.maxWeight {
		return
	}
	c.mu.Lock()
	t := c.walk(v.owner, true)
	if k.kind == kindNode {
		t.meta = true
	} else {
		if t.shards == nil {
			t.shards = make(map[string]struct{})
		}
		t.shards[k.key] = struct{}{}
	}
	c.bytes += v.weight
	c.mu.Unlock()
	c.lru.Add(k, v) // evicts the least recently used beyond maxEntries
	for {
		c.mu.Lock()
		over := c.bytes > c.maxBytes
		c.mu.Unlock()
		if !over {
			return
		}
		c.lru.RemoveOldest()
	}
}

// evicted is the LRU's eviction callback: it removes the entry from the
// tree. It runs under the LRU's lock.
func (c *metaCache) evicted(k cacheKey, v cacheVal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bytes -= v.weight
	t := c.walk(v.owner, false)
	if t == nil {
		return
	}
	if k.kind == kindNode {
		t.meta = false
	} else {
		delete(t.shards, k.key)
	}
	for t.parent != nil && t.empty() {
		delete(t.parent.children, t.name)
		t = t.parent
	}
}

// walk returns the tree node of path, made if create is set, else nil if
// absent. The caller holds mu.
func (c *metaCache) walk(path string, create bool) *cacheNode {
	t := c.root
	if path == "" {
		return t
	}
	for name := range strings.SplitSeq(path, "/") {
		ch := t.children[name]
		if ch == nil {
			if !create {
				return nil
			}
			if t.children == nil {
				t.children = make(map[string]*cacheNode)
			}
			ch = &cacheNode{parent: t, name: name}
			t.children[name] = ch
		}
		t = ch
	}
	return t
}

// dropNode drops the metadata of the node at path and its shard indexes:
// the node changed, and with it, perhaps, its layout.
func (c *metaCache) dropNode(path string) {
	if c == nil {
		return
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.dropNodeLocked(path, true)
}

// dropIndexes drops the shard indexes of the array at path, after a write
// to its shards.
func (c *metaCache) dropIndexes(path string) {
	if c == nil {
		return
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.dropNodeLocked(path, false)
}

func (c *metaCache) dropNodeLocked(path string, meta bool) {
	var keys []cacheKey
	c.mu.Lock()
	if t := c.walk(path, false); t != nil {
		keys = t.entries(path, meta, keys)
	}
	c.mu.Unlock()
	c.remove(keys)
}

// entries appends the keys of t's entries (path is t's path): its shard
// indexes, and its metadata if meta is set.
func (t *cacheNode) entries(path string, meta bool, keys []cacheKey) []cacheKey {
	if meta && t.meta {
		keys = append(keys, cacheKey{kindNode, path})
	}
	for k := range t.shards {
		keys = append(keys, cacheKey{kindIndex, k})
	}
	return keys
}

// subtree appends the keys of all entries of t and below it.
func (t *cacheNode) subtree(path string, keys []cacheKey) []cacheKey {
	keys = t.entries(path, true, keys)
	for name, ch := range t.children {
		keys = ch.subtree(joinPath(path, name), keys)
	}
	return keys
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "/" + name
}

func (c *metaCache) remove(keys []cacheKey) {
	for _, k := range keys {
		c.lru.Remove(k)
	}
}

// metaDocs are the keys of a node's metadata, relative to its prefix: a
// write to any of them changes the node.
var metaDocs = [...]string{keyV3, keyZarray, keyZgroup, keyZattrs}

// isMetaDoc reports whether base is the name of a metadata document.
func isMetaDoc(base string) bool {
	for _, d := range metaDocs {
		if base == d {
			return true
		}
	}
	return false
}

// dropKey drops what a raw write of the store key invalidates: the index
// of the shard at key, and if key is a metadata document (zarr.json, v2's
// and NCZarr's .zarray, .zgroup, .zattrs), its node's entries.
func (c *metaCache) dropKey(key string) {
	if c == nil {
		return
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.lru.Remove(cacheKey{kindIndex, key})
	if dir, base := path.Split(key); isMetaDoc(base) {
		c.dropNodeLocked(strings.TrimSuffix(dir, "/"), true)
	}
}

// dropPrefix drops what erasing every key under prefix invalidates: each
// entry stored under it (a shard index whose key, a node any of whose
// metadata documents' keys, starts with prefix), and the shard indexes of
// a node whose metadata goes. It visits the tree along prefix and the
// subtrees it covers, never the whole cache (but for prefix "").
func (c *metaCache) dropPrefix(prefix string) {
	if c == nil {
		return
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if prefix == "" {
		c.lru.Purge()
		return
	}
	var keys []cacheKey
	c.mu.Lock()
	segs := strings.Split(prefix, "/")
	t, tpath := c.root, ""
	for i, seg := range segs {
		// t's own entries under prefix: its shards there, and all of them
		// if one of its documents is.
		np := nodePrefix(tpath)
		docGone := false
		for _, d := range metaDocs {
			if strings.HasPrefix(np+d, prefix) {
				docGone = true
			}
		}
		if docGone {
			keys = t.entries(tpath, true, keys)
		} else {
			for k := range t.shards {
				if strings.HasPrefix(k, prefix) {
					keys = append(keys, cacheKey{kindIndex, k})
				}
			}
		}
		if i == len(segs)-1 {
			// The last segment is partial: every child starting with it
			// lies wholly under prefix.
			for name, ch := range t.children {
				if strings.HasPrefix(name, seg) {
					keys = ch.subtree(joinPath(tpath, name), keys)
				}
			}
			break
		}
		if t = t.children[seg]; t == nil {
			break
		}
		tpath = joinPath(tpath, seg)
	}
	c.mu.Unlock()
	c.remove(keys)
}

// len returns the number of cached entries (tests).
func (c *metaCache) len() int {
	if c == nil {
		return 0
	}
	return c.lru.Len()
}

// path is the path of the array whose layout l is.
func (l *layout) path() string { return strings.TrimSuffix(l.prefix, "/") }
