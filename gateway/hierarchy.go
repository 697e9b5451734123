package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/zarr"
)

// Format is how a node is stored.
type Format int

// Formats.
const (
	FormatV3 Format = iota + 1
	FormatV2
	FormatNCZarr
)

func (f Format) String() string {
	switch f {
	case FormatV3:
		return "zarr v3"
	case FormatV2:
		return "zarr v2"
	case FormatNCZarr:
		return "nczarr"
	}
	return "unknown"
}

// Node is a group or an array as the gateway reports it.
type Node struct {
	Path   string
	Format Format
	Array  *zarr.Array // nil for groups
	Group  *zarr.Group // nil for arrays
}

// NodeKind is what a node is.
type NodeKind int

// Node kinds.
const (
	KindGroup NodeKind = iota + 1
	KindArray
)

// Kind says whether n is a group or an array.
func (n *Node) Kind() NodeKind {
	if n.Array != nil {
		return KindArray
	}
	return KindGroup
}

// Attributes are the node's user attributes in JSON (empty if it has
// none).
func (n *Node) Attributes() json.RawMessage {
	if n.Array != nil {
		return n.Array.Attributes
	}
	return n.Group.Attributes
}

func (n *node) public() *Node {
	return &Node{Path: n.path, Format: n.format(), Array: n.array, Group: n.group}
}

func (n *node) format() Format {
	switch {
	case n.array != nil && n.array.ZarrFormat == 3, n.group != nil && n.group.ZarrFormat == 3:
		return FormatV3
	case n.array != nil && n.array.NCZarr != nil, n.group != nil && n.group.NCZarr != nil:
		return FormatNCZarr
	}
	return FormatV2
}

// node returns the cached or freshly loaded node at path.
func (g *Gateway) node(ctx context.Context, path string) (*node, error) {
	if n, ok := g.cache.node(path); ok {
		g.stats.NodeHits.Add(1)
		return n, nil
	}
	g.stats.NodeMisses.Add(1)
	n, err := g.loadNode(ctx, path)
	if err != nil {
		return nil, err
	}
	g.cache.putNode(n)
	return n, nil
}

// array returns the array at path, or an error if it is a group.
func (g *Gateway) array(ctx context.Context, path string) (*node, error) {
	n, err := g.node(ctx, path)
	if err != nil {
		return nil, err
	}
	if n.array == nil {
		return nil, errs.New(errs.FailedPrecondition, "node %q is a group, not an array", path)
	}
	return n, nil
}

// GetNode returns the node at path.
func (g *Gateway) GetNode(ctx context.Context, path string) (*Node, error) {
	n, err := g.node(ctx, path)
	if err != nil {
		return nil, err
	}
	return n.public(), nil
}

// Children calls fn for each child of the group at path, or with recursive
// for every descendant, depth first in lexical order. Prefixes holding no
// Zarr node are skipped; a recursive listing still looks inside them, for
// hierarchies whose intermediate groups have no metadata (the root may
// have none either).
func (g *Gateway) Children(ctx context.Context, path string, recursive bool, fn func(*Node) error) error {
	n, err := g.node(ctx, path)
	switch {
	case errors.Is(err, errs.NotFound) && path == "":
	case err != nil:
		return err
	case n.group == nil:
		return errs.New(errs.FailedPrecondition, "node %q is an array, it has no children", path)
	}
	return g.children(ctx, path, recursive, fn)
}

func (g *Gateway) children(ctx context.Context, path string, recursive bool, fn func(*Node) error) error {
	var prefixes []string
	for e, err := range g.store.ListDir(ctx, nodePrefix(path)) {
		if err != nil {
			return err
		}
		if e.IsPrefix {
			prefixes = append(prefixes, strings.TrimSuffix(e.Path, "/"))
		}
	}
	slices.Sort(prefixes)
	for _, p := range prefixes {
		child, err := g.node(ctx, p)
		if errors.Is(err, errs.NotFound) {
			if recursive {
				if err := g.children(ctx, p, true, fn); err != nil {
					return err
				}
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(child.public()); err != nil {
			return err
		}
		if recursive && child.group != nil {
			if err := g.children(ctx, p, true, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// GroupSpec describes a new group.
type GroupSpec struct {
	Format     Format
	Attributes json.RawMessage
	Dimensions []zarr.Dimension // NCZarr only
	// NCZarrLegacy writes the NCZarr metadata in netCDF-C 4.9.0's form
	// (upper-case _NCZARR_* keys, partly in .zgroup and .zarray), the only
	// one 4.9.0 (Debian 12's netcdf-bin) reads; netCDF 4.10 reads only the
	// default lower-case form. Groups and arrays created below an NCZarr
	// group take its form whatever this says.
	NCZarrLegacy bool
}

// CreateGroup creates a group at path, and the groups missing above it
// (see ensureParents). A node already there is AlreadyExists.
func (g *Gateway) CreateGroup(ctx context.Context, path string, spec GroupSpec) (*Node, error) {
	if err := g.checkFree(ctx, path); err != nil {
		return nil, err
	}
	attrs, err := checkAttrs(spec.Attributes)
	if err != nil {
		return nil, err
	}
	grp := &zarr.Group{ZarrFormat: 3, Attributes: attrs}
	switch spec.Format {
	case 0, FormatV3:
	case FormatV2:
		grp.ZarrFormat = 2
	case FormatNCZarr:
		grp.ZarrFormat = 2
		if grp.NCZarr, err = g.newNCZarrGroup(ctx, path, spec); err != nil {
			return nil, err
		}
		grp.Dimensions = spec.Dimensions
	default:
		return nil, errs.New(errs.InvalidArgument, "create group %q: unknown format %d", path, spec.Format)
	}
	if (len(spec.Dimensions) > 0 || spec.NCZarrLegacy) && spec.Format != FormatNCZarr {
		return nil, errs.New(errs.InvalidArgument, "create group %q: dimensions and the legacy form are NCZarr features; ask for the NCZarr format", path)
	}
	if err := g.ensureParents(ctx, path, spec.Format, grp.NCZarr != nil && grp.NCZarr.Legacy); err != nil {
		return nil, err
	}
	n := &node{path: path, group: grp}
	if err := g.writeNew(ctx, n); err != nil {
		return nil, err
	}
	if spec.Format == FormatNCZarr && path != "" {
		if err := g.registerNCZarrChild(ctx, path, false); err != nil {
			return nil, err
		}
	}
	return n.public(), nil
}

// ArraySpec describes a new array.
type ArraySpec struct {
	Format     Format
	Shape      []int64
	DataType   string
	ChunkShape []int64
	// ShardShape, when set, stores chunks in shards of this shape (v3).
	ShardShape []int64
	// Codecs is the (inner) chunks' chain as a v3 codecs JSON array; empty
	// means bytes + zstd.
	Codecs json.RawMessage
	// FillValue in v3 JSON form; empty means the data type's zero.
	FillValue json.RawMessage
	// DimensionNames name the dimensions. In NCZarr each must be a shared
	// dimension of the array's group or of an enclosing group (the
	// innermost declaring it wins, as in netCDF), or a full reference to
	// one ("/sub/level"), with the array's length along it.
	DimensionNames []string
	Attributes     json.RawMessage
}

// DefaultCodecs is the chain of a new array that names none.
var DefaultCodecs = json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3,"checksum":false}}]`)

// CreateArray creates an array at path, and the groups missing above it
// (see ensureParents). A node already there is AlreadyExists; a specification the format cannot express is
// InvalidArgument naming the field.
func (g *Gateway) CreateArray(ctx context.Context, path string, spec ArraySpec) (*Node, error) {
	a, err := buildArray(path, spec)
	if err != nil {
		return nil, err
	}
	if spec.Format == FormatNCZarr {
		if err := g.resolveNCZarrDims(ctx, path, a); err != nil {
			return nil, err
		}
	}
	n := &node{path: path, array: a}
	// An array this gateway could not read or write is refused up front
	// (a shard index without a fixed size, for one). A gateway without a
	// codec engine only manages metadata.
	if _, err := g.layout(n); err != nil && g.codecs != nil {
		return nil, fmt.Errorf("create array %q: %w", path, err)
	}
	if err := g.checkFree(ctx, path); err != nil {
		return nil, err
	}
	// The array's form is its nearest group's (resolveNCZarrDims), which
	// is also what the missing groups between take.
	if err := g.ensureParents(ctx, path, spec.Format, false); err != nil {
		return nil, err
	}
	if err := g.writeNew(ctx, n); err != nil {
		return nil, err
	}
	if spec.Format == FormatNCZarr {
		if err := g.registerNCZarrChild(ctx, path, true); err != nil {
			return nil, err
		}
	}
	return n.public(), nil
}

func buildArray(path string, spec ArraySpec) (*zarr.Array, error) {
	fail := func(field, format string, args ...any) error {
		return errs.New(errs.InvalidArgument, "create array %q: %s: %s", path, field, fmt.Sprintf(format, args...))
	}
	dt, err := zarr.ParseDataType(spec.DataType)
	if err != nil {
		return nil, fmt.Errorf("create array %q: data_type: %w", path, err)
	}
	nd := len(spec.Shape)
	if len(spec.ChunkShape) == 0 {
		spec.ChunkShape = slices.Clone(spec.Shape)
		for i := range spec.ChunkShape {
			spec.ChunkShape[i] = max(1, spec.ChunkShape[i])
		}
	}
	if len(spec.ChunkShape) != nd {
		return nil, fail("chunk_shape", "has %d dimensions, shape has %d", len(spec.ChunkShape), nd)
	}
	for i, s := range spec.Shape {
		if s < 0 {
			return nil, fail("shape", "dimension %d is negative", i)
		}
		if spec.ChunkShape[i] <= 0 {
			return nil, fail("chunk_shape", "dimension %d must be positive", i)
		}
	}
	if len(spec.DimensionNames) != 0 && len(spec.DimensionNames) != nd {
		return nil, fail("dimension_names", "has %d entries, shape has %d dimensions", len(spec.DimensionNames), nd)
	}
	attrs, err := checkAttrs(spec.Attributes)
	if err != nil {
		return nil, fmt.Errorf("create array %q: %w", path, err)
	}
	codecsJSON := spec.Codecs
	if len(bytes.TrimSpace(codecsJSON)) == 0 {
		codecsJSON = DefaultCodecs
		if dt.VariableLength() {
			codecsJSON = json.RawMessage(`[{"name":"vlen-utf8"},{"name":"zstd","configuration":{"level":3,"checksum":false}}]`)
			if dt.Kind == zarr.KindBytes {
				codecsJSON = json.RawMessage(`[{"name":"vlen-bytes"},{"name":"zstd","configuration":{"level":3,"checksum":false}}]`)
			}
		}
	}
	var codecs []zarr.CodecSpec
	if err := json.Unmarshal(codecsJSON, &codecs); err != nil {
		return nil, fail("codecs", "not a JSON array of {name, configuration} objects: %v", err)
	}
	a := &zarr.Array{
		ZarrFormat: 3, Shape: spec.Shape, DataType: dt, ChunkShape: spec.ChunkShape,
		ChunkKeyEncoding: zarr.ChunkKeyEncoding{Name: "default", Separator: '/'},
		Codecs:           codecs, DimensionNames: spec.DimensionNames, Attributes: attrs,
	}
	if len(spec.ShardShape) > 0 {
		if spec.Format != 0 && spec.Format != FormatV3 {
			return nil, fail("shard_shape", "sharding needs Zarr v3")
		}
		if len(spec.ShardShape) != nd {
			return nil, fail("shard_shape", "has %d dimensions, shape has %d", len(spec.ShardShape), nd)
		}
		for i := range nd {
			if spec.ShardShape[i] <= 0 || spec.ShardShape[i]%spec.ChunkShape[i] != 0 {
				return nil, fail("shard_shape", "dimension %d (%d) must be a positive multiple of the chunk shape (%d)", i, spec.ShardShape[i], spec.ChunkShape[i])
			}
		}
		cfg, _ := json.Marshal(map[string]any{
			"chunk_shape":    spec.ChunkShape,
			"codecs":         codecs,
			"index_codecs":   []zarr.CodecSpec{{Name: "bytes", Configuration: json.RawMessage(`{"endian":"little"}`)}, {Name: "crc32c"}},
			"index_location": "end",
		})
		a.Codecs = []zarr.CodecSpec{{Name: "sharding_indexed", Configuration: cfg}}
		a.ChunkShape = spec.ShardShape
	}
	if len(spec.FillValue) > 0 {
		a.FillValue, a.FillNull, err = zarr.ParseFillValue(dt, spec.FillValue)
		if err != nil {
			return nil, fmt.Errorf("create array %q: fill_value: %w", path, err)
		}
	} else if !dt.VariableLength() {
		a.FillValue = make([]byte, dt.Size)
	}
	switch spec.Format {
	case 0, FormatV3:
	case FormatV2, FormatNCZarr:
		a.ZarrFormat = 2
		a.ChunkKeyEncoding = zarr.ChunkKeyEncoding{Name: "v2", Separator: '.'}
		if spec.Format == FormatNCZarr {
			a.ChunkKeyEncoding.Separator = '/'
			refs := make([]string, len(spec.DimensionNames))
			for i, d := range spec.DimensionNames {
				if d == "" {
					return nil, fail("dimension_names", "NCZarr needs a name for every dimension")
				}
				refs[i] = "/" + d
			}
			a.NCZarr = &zarr.NCZarrArray{DimensionRefs: refs, Storage: "chunked"}
		}
	default:
		return nil, fail("format", "unknown format %d", spec.Format)
	}
	// Encoding validates the chain against the format.
	if _, err := encodeDocs(&node{path: path, array: a}); err != nil {
		return nil, fmt.Errorf("create array %q: %w", path, err)
	}
	return a, nil
}

func checkAttrs(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errs.New(errs.InvalidArgument, "attributes: not a JSON object: %v", err)
	}
	return raw, nil
}

// checkFree fails with AlreadyExists if a node is at path.
func (g *Gateway) checkFree(ctx context.Context, path string) error {
	_, err := g.loadNode(ctx, path)
	switch {
	case err == nil:
		return errs.New(errs.AlreadyExists, "a node already exists at %q", path)
	case errors.Is(err, errs.NotFound):
		return nil
	}
	return err
}

// doc is one metadata document to store.
type doc struct {
	key  string
	data []byte
}

// encodeDocs encodes a node's metadata documents, the defining one
// (zarr.json, .zarray or .zgroup) first.
func encodeDocs(n *node) ([]doc, error) {
	p := n.prefix()
	switch {
	case n.array != nil && n.array.ZarrFormat == 3:
		b, err := n.array.EncodeV3()
		return []doc{{p + keyV3, b}}, err
	case n.group != nil && n.group.ZarrFormat == 3:
		b, err := n.group.EncodeV3()
		return []doc{{p + keyV3, b}}, err
	case n.array != nil:
		za, zattrs, err := n.array.EncodeV2()
		return []doc{{p + keyZarray, za}, {p + keyZattrs, zattrs}}, err
	default:
		zg, zattrs, err := n.group.EncodeV2()
		return []doc{{p + keyZgroup, zg}, {p + keyZattrs, zattrs}}, err
	}
}

// writeNew stores a new node's documents. The defining document is written
// only if absent, so two concurrent creators cannot both succeed.
func (g *Gateway) writeNew(ctx context.Context, n *node) error {
	docs, err := encodeDocs(n)
	if err != nil {
		return err
	}
	if err := g.createDoc(ctx, n.path, docs[0]); err != nil {
		return err
	}
	for _, d := range docs[1:] {
		if len(d.data) == 0 {
			continue
		}
		// The node is new and ours: repeating this write is harmless.
		if _, err := retry(ctx, g.cfg.StoreRetries, func() (string, error) {
			return g.store.Set(ctx, d.key, bytes.NewReader(d.data), storesvc.Condition{})
		}); err != nil {
			return err
		}
	}
	g.cache.dropNode(n.path)
	return nil
}

// createDoc writes a node's defining document only if absent. When the
// answer is lost (the store worker went away), it reads the key back: our
// own document there means the write landed.
func (g *Gateway) createDoc(ctx context.Context, path string, d doc) error {
	for attempt := 1; ; attempt++ {
		g.cfg.StoreRetries.Request()
		_, err := g.store.Set(ctx, d.key, bytes.NewReader(d.data), storesvc.Condition{IfAbsent: true})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errs.FailedPrecondition):
			return errs.New(errs.AlreadyExists, "a node already exists at %q", path)
		}
		if err := again(ctx, g.cfg.StoreRetries, attempt, err); err != nil {
			return err
		}
		stored, rerr := retry(ctx, g.cfg.StoreRetries, func() (read, error) {
			data, gen, err := storesvc.ReadAll(ctx, g.store, d.key)
			return read{data, gen}, err
		})
		switch {
		case rerr == nil && bytes.Equal(stored.data, d.data):
			return nil
		case rerr == nil:
			return errs.New(errs.AlreadyExists, "a node already exists at %q", path)
		case !errors.Is(rerr, errs.NotFound):
			return rerr
		}
	}
}

// read is a value read with its generation.
type read struct {
	data []byte
	gen  string
}

// update applies change to the node at path and writes the documents that
// changed, each conditioned on the generation it was read at; on a
// conflict it reads again and retries.
func (g *Gateway) update(ctx context.Context, path string, change func(*node) error) (*node, error) {
	lost := 0 // writes lost with their worker: retries of the store tier
	for range g.cfg.MaxWriteAttempts {
		n, before, gens, err := g.readDocs(ctx, path)
		if err != nil {
			return nil, err
		}
		if err := change(n); err != nil {
			return nil, err
		}
		after, err := encodeDocs(n)
		if err != nil {
			return nil, err
		}
		conflict := false
		for i, d := range after {
			if i < len(before) && before[i].key == d.key && bytes.Equal(before[i].data, d.data) {
				continue
			}
			cond := storesvc.Condition{IfAbsent: true}
			if gen, ok := gens[d.key]; ok {
				cond = storesvc.Condition{IfGenerationMatch: gen}
			}
			g.cfg.StoreRetries.Request()
			if _, err := g.store.Set(ctx, d.key, bytes.NewReader(d.data), cond); err != nil {
				// A conflict, or an answer lost with the worker: read again;
				// the generation check makes the repeat safe. A conflict
				// is contention, not a failure; a lost answer is a retry
				// of the store tier (budget, backoff).
				if errors.Is(err, errs.FailedPrecondition) {
					conflict = true
					break
				}
				lost++
				if err := again(ctx, g.cfg.StoreRetries, lost, err); err != nil {
					return nil, err
				}
				conflict = true
				break
			}
		}
		g.cache.dropNode(path)
		if !conflict {
			return n, nil
		}
	}
	return nil, errs.New(errs.Aborted, "update of %q: metadata kept changing, gave up after %d attempts", path, g.cfg.MaxWriteAttempts)
}

// readDocs reads the node's metadata documents with their generations and
// parses the node from exactly those bytes.
func (g *Gateway) readDocs(ctx context.Context, path string) (*node, []doc, map[string]string, error) {
	probe, err := g.loadNode(ctx, path)
	if err != nil {
		return nil, nil, nil, err
	}
	keys, err := encodeDocs(probe)
	if err != nil {
		return nil, nil, nil, err
	}
	docs := make([]doc, len(keys))
	gens := make(map[string]string)
	for i, d := range keys {
		r, err := retry(ctx, g.cfg.StoreRetries, func() (read, error) {
			data, gen, err := storesvc.ReadAll(ctx, g.store, d.key)
			return read{data, gen}, err
		})
		data, gen := r.data, r.gen
		switch {
		case errors.Is(err, errs.NotFound) && i > 0: // .zattrs may be absent
		case err != nil:
			return nil, nil, nil, err
		default:
			gens[d.key] = gen
		}
		docs[i] = doc{key: d.key, data: data}
	}
	n := &node{path: path}
	switch {
	case probe.format() == FormatV3:
		parsed, err := zarr.ParseV3(docs[0].data)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("node %q: %w", path, err)
		}
		n.array, n.group = parsed.Array, parsed.Group
	case probe.array != nil:
		n.array, err = zarr.ParseV2Array(docs[0].data, docs[1].data)
	default:
		n.group, err = zarr.ParseV2Group(docs[0].data, docs[1].data)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("node %q: %w", path, err)
	}
	if (n.array == nil) != (probe.array == nil) {
		return nil, nil, nil, errs.New(errs.Aborted, "node %q changed kind while being updated", path)
	}
	// Compare against the canonical encoding, so unchanged documents are
	// not rewritten.
	canon, err := encodeDocs(n)
	if err != nil {
		return nil, nil, nil, err
	}
	return n, canon, gens, nil
}

// UpdateAttributes replaces the node's attributes with attrs, or with merge
// sets only the members attrs names.
func (g *Gateway) UpdateAttributes(ctx context.Context, path string, attrs json.RawMessage, merge bool) (*Node, error) {
	attrs, err := checkAttrs(attrs)
	if err != nil {
		return nil, err
	}
	n, err := g.update(ctx, path, func(n *node) error {
		cur := n.attributes()
		next := attrs
		if merge && len(*cur) > 0 {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(*cur, &m); err != nil {
				return errs.New(errs.DataLoss, "attributes of %q are not a JSON object: %v", path, err)
			}
			var add map[string]json.RawMessage
			json.Unmarshal(attrs, &add)
			for k, v := range add {
				m[k] = v
			}
			next, _ = json.Marshal(m)
		}
		*cur = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return n.public(), nil
}

func (n *node) attributes() *json.RawMessage {
	if n.array != nil {
		return &n.array.Attributes
	}
	return &n.group.Attributes
}

// Delete removes the node at path and everything below it ("" deletes the
// whole hierarchy).
func (g *Gateway) Delete(ctx context.Context, path string) error {
	if _, err := g.node(ctx, path); err != nil {
		return err
	}
	err := g.store.ErasePrefix(ctx, nodePrefix(path))
	g.cache.dropPrefix(nodePrefix(path))
	return err
}

// Resize changes the array's shape (same rank) and erases the chunks that
// lie wholly outside the new shape.
func (g *Gateway) Resize(ctx context.Context, path string, shape []int64) (*Node, error) {
	n, err := g.update(ctx, path, func(n *node) error {
		if n.array == nil {
			return errs.New(errs.FailedPrecondition, "node %q is a group, not an array", path)
		}
		if len(shape) != len(n.array.Shape) {
			return errs.New(errs.InvalidArgument, "resize %q: new shape has %d dimensions, the array %d", path, len(shape), len(n.array.Shape))
		}
		for i, s := range shape {
			if s < 0 {
				return errs.New(errs.InvalidArgument, "resize %q: dimension %d is negative", path, i)
			}
		}
		n.array.Shape = slices.Clone(shape)
		return nil
	})
	if err != nil {
		return nil, err
	}
	newGrid := n.array.GridShape()
	var stale []string
	for k, err := range g.store.ListPrefix(ctx, n.prefix()) {
		if err != nil {
			return nil, err
		}
		coords, ok := parseChunkKey(n.array, n.prefix(), k)
		if !ok || len(coords) != len(newGrid) {
			continue
		}
		for i, c := range coords {
			if c >= newGrid[i] {
				stale = append(stale, k)
				break
			}
		}
	}
	if len(stale) > 0 {
		if err := g.store.EraseValues(ctx, stale); err != nil {
			return nil, err
		}
	}
	return n.public(), nil
}

// parseChunkKey returns the grid coordinates of a chunk key of array a
// under prefix, or false if the key is not one of its chunk keys.
func parseChunkKey(a *zarr.Array, prefix, key string) ([]int64, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return nil, false
	}
	sep := string(a.ChunkKeyEncoding.Separator)
	if a.ChunkKeyEncoding.Name == "default" {
		if rest == "c" {
			return []int64{}, true
		}
		rest, ok = strings.CutPrefix(rest, "c"+sep)
		if !ok {
			return nil, false
		}
	}
	parts := strings.Split(rest, sep)
	coords := make([]int64, len(parts))
	for i, p := range parts {
		c, err := strconv.ParseInt(p, 10, 64)
		if err != nil || c < 0 {
			return nil, false
		}
		coords[i] = c
	}
	return coords, true
}

// registerNCZarrChild adds a new NCZarr variable or subgroup to its parent
// group's lists, as netCDF expects to find it there.
func (g *Gateway) registerNCZarrChild(ctx context.Context, path string, isArray bool) error {
	parent, name := "", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		parent, name = path[:i], path[i+1:]
	}
	_, err := g.update(ctx, parent, func(n *node) error {
		if n.group == nil || n.group.NCZarr == nil {
			return errs.New(errs.FailedPrecondition, "NCZarr node %q needs an NCZarr parent group at %q", path, parent)
		}
		list := &n.group.NCZarr.Groups
		if isArray {
			list = &n.group.NCZarr.Arrays
		}
		if !slices.Contains(*list, name) {
			*list = append(*list, name)
		}
		return nil
	})
	return err
}
