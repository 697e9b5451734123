package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// cachedKeys lists the cache's entries as "node:path" and "index:key",
// sorted, after checking that the tree, the LRU and the byte count agree.
func cachedKeys(t *testing.T, c *metaCache) []string {
	t.Helper()
	c.opMu.Lock()
	defer c.opMu.Unlock()
	var lruKeys []string
	var weight int64
	for _, k := range c.lru.Keys() {
		v, ok := c.lru.Peek(k)
		if !ok { // expired, not yet removed
			continue
		}
		weight += v.weight
		lruKeys = append(lruKeys, k.String())
	}
	slices.Sort(lruKeys)
	c.mu.Lock()
	defer c.mu.Unlock()
	var treeKeys []string
	for _, k := range c.root.subtree("", nil) {
		treeKeys = append(treeKeys, k.String())
	}
	slices.Sort(treeKeys)
	if !slices.Equal(lruKeys, treeKeys) {
		t.Fatalf("the tree holds %v, the LRU %v", treeKeys, lruKeys)
	}
	if c.bytes != weight {
		t.Fatalf("byte count %d, entries weigh %d", c.bytes, weight)
	}
	var prune func(n *cacheNode)
	prune = func(n *cacheNode) {
		for _, ch := range n.children {
			if ch.empty() {
				t.Fatalf("empty tree node %q left", ch.name)
			}
			prune(ch)
		}
	}
	prune(c.root)
	return lruKeys
}

func (k cacheKey) String() string {
	if k.kind == kindNode {
		return "node:" + k.key
	}
	return "index:" + k.key
}

func testNode(path string) *node {
	return &node{path: path, group: &zarr.Group{ZarrFormat: 3}}
}

func testIndex(n int) *shardIdx {
	return &shardIdx{found: true, entries: make(codec.ShardIndex, n)}
}

// TestMetaCacheLRU: at the entry bound, the least recently used entry goes
// and one used since it was put stays.
func TestMetaCacheLRU(t *testing.T) {
	c := newMetaCache(time.Hour, 3, 1<<30)
	for _, p := range []string{"a", "b", "c"} {
		c.putNode(testNode(p))
	}
	if _, ok := c.node("a"); !ok { // a is now the most recently used
		t.Fatal("a not cached")
	}
	c.putNode(testNode("d"))
	if got, want := cachedKeys(t, c), []string{"node:a", "node:c", "node:d"}; !slices.Equal(got, want) {
		t.Fatalf("cached %v, want %v", got, want)
	}
	c.putIndex("d", "d/c/0", testIndex(4))
	if got, want := cachedKeys(t, c), []string{"index:d/c/0", "node:a", "node:d"}; !slices.Equal(got, want) {
		t.Fatalf("cached %v, want %v", got, want)
	}
}

// TestMetaCacheBytes: the entries' weight stays under the byte bound,
// evicting the least recently used; an entry heavier than a quarter of it
// is not cached.
func TestMetaCacheBytes(t *testing.T) {
	const maxBytes = 64 << 10
	c := newMetaCache(time.Hour, 1000, maxBytes)
	per := 1024 // 16 KiB per index, with the overhead a little more
	c.putIndex("a", "a/c/0", testIndex(per/2))
	for i := range 8 {
		c.putIndex("a", fmt.Sprintf("a/c/%d", i+1), testIndex(per/2))
		c.index("a/c/0") // kept in use
	}
	keys := cachedKeys(t, c)
	if c.bytes > maxBytes {
		t.Fatalf("%d bytes cached, more than the bound %d", c.bytes, maxBytes)
	}
	if !slices.Contains(keys, "index:a/c/0") || !slices.Contains(keys, "index:a/c/8") || slices.Contains(keys, "index:a/c/1") {
		t.Fatalf("cached %v: want the one in use and the newest, not the oldest", keys)
	}
	c.putIndex("a", "a/c/9", testIndex(per)) // over a quarter: not cached
	if _, ok := c.index("a/c/9"); ok {
		t.Fatal("an index heavier than a quarter of the bound was cached")
	}
	// Nor does it leave an older value of its key behind.
	c.putIndex("a", "a/c/8", testIndex(per))
	if _, ok := c.index("a/c/8"); ok {
		t.Fatal("the older value of a key whose new value is too heavy stayed")
	}
	cachedKeys(t, c)
}

func TestMetaCacheTTL(t *testing.T) {
	c := newMetaCache(50*time.Millisecond, 100, 1<<20)
	c.putNode(testNode("a"))
	c.putIndex("a", "a/c/0", testIndex(4))
	if _, ok := c.node("a"); !ok {
		t.Fatal("not cached")
	}
	time.Sleep(60 * time.Millisecond)
	if _, ok := c.node("a"); ok {
		t.Fatal("node served after its TTL")
	}
	if _, ok := c.index("a/c/0"); ok {
		t.Fatal("index served after its TTL")
	}
	// The lookups removed the expired entries, from the tree too.
	for deadline := time.Now().Add(5 * time.Second); c.len() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d expired entries never removed", c.len())
		}
	}
	if keys := cachedKeys(t, c); len(keys) > 0 || !c.root.empty() {
		t.Fatalf("left after expiry: %v", keys)
	}
}

func TestMetaCacheDisabled(t *testing.T) {
	c := newMetaCache(-1, 100, 1<<20)
	c.putNode(testNode("a"))
	if _, ok := c.node("a"); ok {
		t.Fatal("a disabled cache served a node")
	}
	c.dropKey("a/zarr.json")
	c.dropPrefix("")
	c.dropNode("a")
	c.dropIndexes("a")
}

// cacheFixture is a cache holding nodes (groups and arrays of each format)
// and shard indexes of the arrays, as "node:path" and "index:key".
var cacheFixture = []string{
	"node:", "index:c/0", // a root array (v3)
	"node:a", "node:a/b", "index:a/b/c/0/0", "index:a/b/c/0/1", // v3
	"node:a/bc", "index:a/bc/0.0", "index:a/bc/0.1", // v2, "." separator
	"node:a/b/d", "index:a/b/d/0/0", // v2 or NCZarr, "/" separator
	"node:x", "node:x/y",
}

// fixtureOwners are the arrays the fixture's shards belong to.
var fixtureOwners = map[string]string{
	"c/0": "", "a/b/c/0/0": "a/b", "a/b/c/0/1": "a/b", "a/bc/0.0": "a/bc", "a/bc/0.1": "a/bc", "a/b/d/0/0": "a/b/d",
}

func fillCache(c *metaCache) {
	for _, e := range cacheFixture {
		kind, key, _ := strings.Cut(e, ":")
		if kind == "node" {
			c.putNode(testNode(key))
		} else {
			c.putIndex(fixtureOwners[key], key, testIndex(4))
		}
	}
}

// TestMetaCacheDropExact: a raw write drops the entries under the written
// key's node and nothing else; an erased prefix everything under it.
func TestMetaCacheDropExact(t *testing.T) {
	for _, tc := range []struct {
		op   string
		gone []string
	}{
		{"key a/b/c/0/0", []string{"index:a/b/c/0/0"}},
		{"key a/b/zarr.json", []string{"node:a/b", "index:a/b/c/0/0", "index:a/b/c/0/1"}},
		{"key a/bc/.zattrs", []string{"node:a/bc", "index:a/bc/0.0", "index:a/bc/0.1"}},
		{"key a/bc/.zarray", []string{"node:a/bc", "index:a/bc/0.0", "index:a/bc/0.1"}},
		{"key x/.zgroup", []string{"node:x"}},
		{"key zarr.json", []string{"node:", "index:c/0"}},
		{"key a/bc/0.1", []string{"index:a/bc/0.1"}},
		{"key a/b/d/0/0", []string{"index:a/b/d/0/0"}},
		{"key a/b/d/0", nil},
		{"key a/b/c/zarr.json", nil}, // no node a/b/c: nothing of a/b's
		{"node a/b", []string{"node:a/b", "index:a/b/c/0/0", "index:a/b/c/0/1"}},
		{"indexes a/b", []string{"index:a/b/c/0/0", "index:a/b/c/0/1"}},
		{"prefix a/b/", []string{"node:a/b", "index:a/b/c/0/0", "index:a/b/c/0/1", "node:a/b/d", "index:a/b/d/0/0"}},
		{"prefix a/b", []string{"node:a/b", "index:a/b/c/0/0", "index:a/b/c/0/1", "node:a/b/d", "index:a/b/d/0/0",
			"node:a/bc", "index:a/bc/0.0", "index:a/bc/0.1"}},
		{"prefix a/b/c/", []string{"index:a/b/c/0/0", "index:a/b/c/0/1"}},
		{"prefix a/b/c/0/1", []string{"index:a/b/c/0/1"}},
		{"prefix a/bc/0.", []string{"index:a/bc/0.0", "index:a/bc/0.1"}},
		{"prefix a/bc/.z", []string{"node:a/bc", "index:a/bc/0.0", "index:a/bc/0.1"}},
		{"prefix a/b/z", []string{"node:a/b", "index:a/b/c/0/0", "index:a/b/c/0/1"}},
		{"prefix x/", []string{"node:x", "node:x/y"}},
		{"prefix x/y/", []string{"node:x/y"}},
		{"prefix q/", nil},
		{"prefix c/", []string{"index:c/0"}},
		{"prefix a/", []string{"node:a", "node:a/b", "index:a/b/c/0/0", "index:a/b/c/0/1", "node:a/bc", "index:a/bc/0.0",
			"index:a/bc/0.1", "node:a/b/d", "index:a/b/d/0/0"}},
		{"prefix ", cacheFixture},
	} {
		c := newMetaCache(time.Hour, 1000, 1<<30)
		fillCache(c)
		if got := cachedKeys(t, c); len(got) != len(cacheFixture) {
			t.Fatalf("fixture: cached %v", got)
		}
		verb, arg, _ := strings.Cut(tc.op, " ")
		switch verb {
		case "key":
			c.dropKey(arg)
		case "node":
			c.dropNode(arg)
		case "indexes":
			c.dropIndexes(arg)
		case "prefix":
			c.dropPrefix(arg)
		}
		var want []string
		for _, e := range cacheFixture {
			if !slices.Contains(tc.gone, e) {
				want = append(want, e)
			}
		}
		slices.Sort(want)
		if got := cachedKeys(t, c); !slices.Equal(got, want) {
			t.Errorf("%s: cached %v, want %v", tc.op, got, want)
		}
	}
}

// TestMetaCacheConcurrent runs lookups, puts, drops and evictions (entry
// and byte bounds, expiry) at once; the tree and the LRU must agree after.
func TestMetaCacheConcurrent(t *testing.T) {
	c := newMetaCache(20*time.Millisecond, 50, 40<<10)
	paths := []string{"", "a", "a/b", "a/bc", "x", "x/y/z"}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 3000 {
				p := paths[r.IntN(len(paths))]
				key := nodePrefix(p) + fmt.Sprintf("c/%d", r.IntN(20))
				switch r.IntN(8) {
				case 0:
					c.putNode(testNode(p))
				case 1, 2:
					c.putIndex(p, key, testIndex(r.IntN(600)))
				case 3:
					c.node(p)
					c.index(key)
				case 4:
					c.dropKey(key)
				case 5:
					c.dropKey(nodePrefix(p) + keyV3)
				case 6:
					c.dropPrefix(p)
				case 7:
					c.dropIndexes(p)
				}
			}
		})
	}
	wg.Wait()
	cachedKeys(t, c)
	if c.bytes > c.maxBytes || c.len() > 50 {
		t.Fatalf("%d entries, %d bytes: over the bounds", c.len(), c.bytes)
	}
}

// keyCountingStore counts the reads of each key, and separately the suffix
// reads (shard indexes at the end of their shard).
type keyCountingStore struct {
	*memory.Store
	mu       sync.Mutex
	reads    map[string]int
	suffixes map[string]int
}

func newKeyCountingStore() *keyCountingStore {
	return &keyCountingStore{Store: memory.New(), reads: map[string]int{}, suffixes: map[string]int{}}
}

func (s *keyCountingStore) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	s.mu.Lock()
	s.reads[key]++
	if r.IsSuffix() {
		s.suffixes[key]++
	}
	s.mu.Unlock()
	return s.Store.Get(ctx, key, r)
}

func (s *keyCountingStore) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.reads)
	clear(s.suffixes)
}

func (s *keyCountingStore) count(key string) (reads, suffixes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[key], s.suffixes[key]
}

// One shard of 8 int32 of four inner chunks, its index at the end.
const cacheTestCodecs = `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_location":"end"}}]`

func createShardedArray(t *testing.T, g *Gateway, path string) {
	t.Helper()
	if _, err := g.CreateArray(ctx, path, ArraySpec{Shape: []int64{8}, DataType: "int32", ChunkShape: []int64{8}, Codecs: json.RawMessage(cacheTestCodecs)}); err != nil {
		t.Fatal(err)
	}
}

func writeInts(t *testing.T, g *Gateway, path string, start int64, vals ...int32) {
	t.Helper()
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
	}
	sel := []zarr.Range{{Start: start, Stop: start + int64(len(vals)), Step: 1}}
	blk := Block{Origin: []int64{0}, Shape: []int64{int64(len(vals))}, Data: data}
	if _, err := g.WriteSlab(ctx, path, sel, nextFrom([]Block{blk})); err != nil {
		t.Fatal(err)
	}
}

func readInts(t *testing.T, g *Gateway, path string) []int32 {
	t.Helper()
	data, _ := readAll(t, g, path, nil, 4)
	out := make([]int32, len(data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out
}

// TestRawWriteDropsExactly: a raw write through the StoreService
// pass-through drops the written shard's cached index, so the next read
// sees the new data, and keeps the entries of other nodes and the written
// array's metadata.
func TestRawWriteDropsExactly(t *testing.T) {
	st := newKeyCountingStore()
	g := New(st, codecsvc.NewLocal(), Config{MetadataTTL: time.Hour})
	for _, p := range []string{"g/x", "g/y", "h"} {
		createShardedArray(t, g, p)
		writeInts(t, g, p, 0, 1, 2) // the first inner chunk only
		if got := readInts(t, g, p); !slices.Equal(got, []int32{1, 2, 0, 0, 0, 0, 0, 0}) {
			t.Fatalf("%s = %v", p, got)
		}
	}
	// The whole shard of g/x, written elsewhere: every inner chunk stored.
	other := New(memory.New(), codecsvc.NewLocal(), Config{})
	createShardedArray(t, other, "g/x")
	writeInts(t, other, "g/x", 0, 9, 8, 7, 6, 5, 4, 3, 2)
	obj, err := other.Store().Get(ctx, "g/x/c/0", storesvc.ByteRange{})
	if err != nil {
		t.Fatal(err)
	}
	shard := new(bytes.Buffer)
	shard.ReadFrom(obj)
	obj.Close()

	st.reset()
	raw := storesvc.Wrap(g.RawStore()) // as the StoreService serves it
	if _, err := raw.Set(ctx, "g/x/c/0", shard, storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	// With the old index (one inner chunk stored), g/x would read as
	// 9, 8 and fill values.
	if got := readInts(t, g, "g/x"); !slices.Equal(got, []int32{9, 8, 7, 6, 5, 4, 3, 2}) {
		t.Fatalf("g/x after a raw write of its shard = %v", got)
	}
	if r, _ := st.count("g/x/zarr.json"); r != 0 {
		t.Errorf("g/x's metadata read again after a write of its shard (%d reads)", r)
	}
	if _, s := st.count("g/x/c/0"); s != 1 {
		t.Errorf("g/x's shard index read %d times, want once", s)
	}
	for _, p := range []string{"g/y", "h"} {
		readInts(t, g, p)
		if r, _ := st.count(p + "/zarr.json"); r != 0 {
			t.Errorf("%s's metadata read again after a write elsewhere", p)
		}
		if _, s := st.count(p + "/c/0"); s != 0 {
			t.Errorf("%s's shard index read again after a write elsewhere", p)
		}
	}

	// A metadata document written raw: that node only.
	st.reset()
	n, err := g.GetNode(ctx, "g/y")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(map[string]any{"zarr_format": 3, "node_type": "group", "attributes": map[string]any{"k": 1}})
	if _, err := raw.Set(ctx, "g/y/zarr.json", bytes.NewReader(doc), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	if n2, err := g.GetNode(ctx, "g/y"); err != nil || n2.Group == nil || n.Array == nil {
		t.Fatalf("g/y after a raw metadata write = %+v, %v; want the new group", n2, err)
	}
	readInts(t, g, "h")
	if r, _ := st.count("h/zarr.json"); r != 0 {
		t.Error("h's metadata read again after a write to g/y")
	}

	// An erased prefix: everything under it, nothing beside it.
	st.reset()
	if err := raw.ErasePrefix(ctx, "g/"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.GetNode(ctx, "g/x"); !errors.Is(err, errs.NotFound) {
		t.Fatalf("g/x after its group was erased: %v, want NotFound", err)
	}
	readInts(t, g, "h")
	if r, s := st.count("h/zarr.json"); r != 0 || s != 0 {
		t.Error("h's entries dropped by the erasure of g/")
	}
}

// TestGatewayWriteDropsExactly: writes through the gateway (a slab, an
// attribute update, a delete) drop their node's entries and keep the
// others'.
func TestGatewayWriteDropsExactly(t *testing.T) {
	st := newKeyCountingStore()
	g := New(st, codecsvc.NewLocal(), Config{MetadataTTL: time.Hour})
	for _, p := range []string{"x", "y"} {
		createShardedArray(t, g, p)
		writeInts(t, g, p, 0, 1, 2)
		readInts(t, g, p)
	}
	st.reset()
	writeInts(t, g, "x", 2, 3, 4)
	if got := readInts(t, g, "x"); !slices.Equal(got, []int32{1, 2, 3, 4, 0, 0, 0, 0}) {
		t.Fatalf("x = %v", got)
	}
	if _, err := g.UpdateAttributes(ctx, "x", json.RawMessage(`{"a":1}`), true); err != nil {
		t.Fatal(err)
	}
	n, err := g.GetNode(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]int
	if err := json.Unmarshal(n.Array.Attributes, &attrs); err != nil || attrs["a"] != 1 {
		t.Fatalf("x after an attribute update: %s, %v", n.Array.Attributes, err)
	}
	if err := g.Delete(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.GetNode(ctx, "x"); !errors.Is(err, errs.NotFound) {
		t.Fatalf("x after Delete: %v, want NotFound", err)
	}
	readInts(t, g, "y")
	if r, _ := st.count("y/zarr.json"); r != 0 {
		t.Error("y's metadata read again after writes to x")
	}
	if r, _ := st.count("y/c/0"); r != 1 { // its data only
		t.Errorf("y's shard read %d times, want once (its index cached)", r)
	}
}

// BenchmarkMetaCache measures the cache's hot path: lookups that hit, from
// parallel readers, and puts.
func BenchmarkMetaCache(b *testing.B) {
	c := newMetaCache(time.Hour, cacheMaxEntries, cacheMaxBytes)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("group/array%d/c/%d/%d", i%16, i/16, i%7)
		c.putIndex(fmt.Sprintf("group/array%d", i%16), keys[i], testIndex(64))
		c.putNode(testNode(fmt.Sprintf("group/array%d", i%16)))
	}
	b.Run("get", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, ok := c.index(keys[i%len(keys)]); !ok {
					panic("miss")
				}
				if _, ok := c.node("group/array3"); !ok {
					panic("miss")
				}
				i++
			}
		})
	})
	b.Run("put", func(b *testing.B) {
		idx := testIndex(64)
		i := 0
		for b.Loop() {
			c.putIndex("group/array1", keys[i%len(keys)], idx)
			i++
		}
	})
}
