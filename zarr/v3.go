package zarr

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// extension is a parsed v3 extension object or short-hand name.
type extension struct {
	Name           string
	Configuration  json.RawMessage
	MustUnderstand *bool
}

func parseExtension(v json.RawMessage, field string) (extension, error) {
	v = bytes.TrimSpace(v)
	var name string
	if len(v) > 0 && v[0] == '"' {
		if err := json.Unmarshal(v, &name); err != nil || name == "" {
			return extension{}, newError(ErrInvalid, "%s: name must be a non-empty string", field)
		}
		return extension{Name: name}, nil
	}
	if !isObject(v) {
		return extension{}, newError(ErrInvalid, "%s: must be a name or an object with \"name\"", field)
	}
	var o struct {
		Name           *string         `json:"name"`
		Configuration  json.RawMessage `json:"configuration"`
		MustUnderstand *bool           `json:"must_understand"`
	}
	if err := json.Unmarshal(v, &o); err != nil {
		return extension{}, newError(ErrInvalid, "%s: %v", field, err)
	}
	if o.Name == nil || *o.Name == "" {
		return extension{}, newError(ErrInvalid, "%s: \"name\" must be a non-empty string", field)
	}
	if len(o.Configuration) > 0 && !isNull(o.Configuration) && !isObject(o.Configuration) {
		return extension{}, newError(ErrInvalid, "%s: \"configuration\" must be an object", field)
	}
	if isNull(o.Configuration) {
		o.Configuration = nil
	}
	return extension{Name: *o.Name, Configuration: o.Configuration, MustUnderstand: o.MustUnderstand}, nil
}

// ParseV3 parses a v3 zarr.json document, array or group, following the
// core specification: short-hand extension names, unknown top-level
// members tolerated only when they are objects with "must_understand":
// false, consolidated metadata as zarr-python 3 writes it. Errors match
// ErrInvalid (malformed, naming the field) or ErrUnsupported
// (an unknown extension that must be understood, naming it).
func ParseV3(data []byte) (Node, error) {
	members, err := parseObject(data, "zarr.json")
	if err != nil {
		return Node{}, err
	}
	m := make(map[string]json.RawMessage, len(members))
	for _, kv := range members {
		m[kv.Key] = kv.Value
	}
	var format int
	if err := json.Unmarshal(m["zarr_format"], &format); err != nil || format != 3 {
		return Node{}, newError(ErrInvalid, "zarr_format: must be 3, not %s", orMissing(m["zarr_format"]))
	}
	var nodeType string
	_ = json.Unmarshal(m["node_type"], &nodeType)
	switch nodeType {
	case "array":
		a, err := parseV3Array(members, m)
		return Node{Array: a}, err
	case "group":
		g, err := parseV3Group(members, m)
		return Node{Group: g}, err
	}
	return Node{}, newError(ErrInvalid, "node_type: must be \"array\" or \"group\", not %s", orMissing(m["node_type"]))
}

func orMissing(v json.RawMessage) string {
	if v == nil {
		return "missing"
	}
	s := string(v)
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// unknownMember decides about a top-level member the parser does not know.
func unknownMember(key string, v json.RawMessage, ext *map[string]json.RawMessage) error {
	if !mustUnderstandFalse(v) {
		return newError(ErrUnsupported, "%s: unknown metadata member that must be understood", key)
	}
	if *ext == nil {
		*ext = map[string]json.RawMessage{}
	}
	(*ext)[key] = v
	return nil
}

func parseAttributes(v json.RawMessage, field string) (json.RawMessage, error) {
	if v == nil || isNull(v) {
		return nil, nil
	}
	if !isObject(v) {
		return nil, newError(ErrInvalid, "%s: must be an object", field)
	}
	return bytes.TrimSpace(v), nil
}

func parseV3Group(members []member, m map[string]json.RawMessage) (*Group, error) {
	g := &Group{ZarrFormat: 3}
	for _, kv := range members {
		var err error
		switch kv.Key {
		case "zarr_format", "node_type":
		case "attributes":
			g.Attributes, err = parseAttributes(kv.Value, "attributes")
		case "consolidated_metadata":
			g.Consolidated, err = parseV3Consolidated(kv.Value)
		default:
			err = unknownMember(kv.Key, kv.Value, &g.Extensions)
		}
		if err != nil {
			return nil, err
		}
	}
	return g, nil
}

func parseV3Consolidated(v json.RawMessage) (map[string]Node, error) {
	if isNull(v) {
		return nil, nil
	}
	var cm struct {
		Kind     string                     `json:"kind"`
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(v, &cm); err != nil {
		return nil, newError(ErrInvalid, "consolidated_metadata: %v", err)
	}
	if cm.Kind != "inline" {
		return nil, newError(ErrUnsupported, "consolidated_metadata.kind: %q is not supported", cm.Kind)
	}
	out := make(map[string]Node, len(cm.Metadata))
	for path, doc := range cm.Metadata {
		n, err := ParseV3(doc)
		if err != nil {
			return nil, wrapError(ErrInvalid, err, "consolidated_metadata.metadata[%q]", path)
		}
		out[path] = n
	}
	return out, nil
}

func parseV3Array(members []member, m map[string]json.RawMessage) (*Array, error) {
	a := &Array{ZarrFormat: 3}
	for _, req := range []string{"shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"} {
		if _, ok := m[req]; !ok {
			return nil, newError(ErrInvalid, "%s: missing", req)
		}
	}
	// data_type first: fill_value and codecs depend on it.
	var err error
	a.DataType, a.dataTypeJSON, err = parseV3DataType(m["data_type"])
	if err != nil {
		return nil, err
	}
	for _, kv := range members {
		v := kv.Value
		switch kv.Key {
		case "zarr_format", "node_type", "data_type":
		case "shape":
			a.Shape, err = parseShape(v, "shape", false)
		case "chunk_grid":
			a.ChunkShape, err = parseChunkGrid(v)
		case "chunk_key_encoding":
			a.ChunkKeyEncoding, err = parseKeyEncoding(v)
		case "fill_value":
			a.FillValue, a.FillNull, err = ParseFillValue(a.DataType, v)
		case "codecs":
			a.Codecs, err = parseCodecList(v, "codecs")
		case "attributes":
			a.Attributes, err = parseAttributes(v, "attributes")
		case "storage_transformers":
			err = a.parseStorageTransformers(v)
		case "dimension_names":
			a.DimensionNames, err = parseDimensionNames(v)
		default:
			err = unknownMember(kv.Key, v, &a.Extensions)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// parseV3DataType returns the data type and, when the document names it by
// an alias that must be written back as is, that JSON.
func parseV3DataType(v json.RawMessage) (DataType, json.RawMessage, error) {
	ext, err := parseExtension(v, "data_type")
	if err != nil {
		return DataType{}, nil, err
	}
	var cfg struct {
		LengthBytes *int `json:"length_bytes"`
	}
	if ext.Configuration != nil {
		_ = json.Unmarshal(ext.Configuration, &cfg)
	}
	sized := func() (int, error) {
		if cfg.LengthBytes == nil || *cfg.LengthBytes <= 0 {
			return 0, newError(ErrInvalid, "data_type: %s needs a positive configuration.length_bytes", ext.Name)
		}
		return *cfg.LengthBytes, nil
	}
	raw := bytes.TrimSpace(v)
	switch ext.Name {
	// zarr-python 3.1 names for types the core spec lacks.
	case "variable_length_bytes":
		return MustDataType("bytes"), raw, nil
	case "null_terminated_bytes":
		n, err := sized()
		if err != nil {
			return DataType{}, nil, err
		}
		return DataType{Name: "S" + strconv.Itoa(n), Kind: KindFixedBytes, Size: n}, raw, nil
	case "fixed_length_utf32":
		n, err := sized()
		if err != nil || n%4 != 0 {
			return DataType{}, nil, newError(ErrInvalid, "data_type: fixed_length_utf32 needs configuration.length_bytes, a positive multiple of 4")
		}
		return DataType{Name: "U" + strconv.Itoa(n/4), Kind: KindFixedUnicode, Size: n}, raw, nil
	case "raw_bytes":
		n, err := sized()
		if err != nil {
			return DataType{}, nil, err
		}
		return DataType{Name: "r" + strconv.Itoa(8*n), Kind: KindRaw, Size: n}, raw, nil
	}
	d, err := ParseDataType(ext.Name)
	if err != nil {
		return DataType{}, nil, err
	}
	if ext.Configuration != nil && string(bytes.TrimSpace(ext.Configuration)) != "{}" {
		return d, raw, nil
	}
	return d, nil, nil
}

func parseChunkGrid(v json.RawMessage) ([]int64, error) {
	ext, err := parseExtension(v, "chunk_grid")
	if err != nil {
		return nil, err
	}
	if ext.Name != "regular" {
		return nil, newError(ErrUnsupported, "chunk_grid: %q is not supported", ext.Name)
	}
	var cfg struct {
		ChunkShape json.RawMessage `json:"chunk_shape"`
	}
	if ext.Configuration == nil || json.Unmarshal(ext.Configuration, &cfg) != nil || cfg.ChunkShape == nil {
		return nil, newError(ErrInvalid, "chunk_grid.configuration.chunk_shape: missing")
	}
	return parseShape(cfg.ChunkShape, "chunk_grid.configuration.chunk_shape", true)
}

func parseKeyEncoding(v json.RawMessage) (ChunkKeyEncoding, error) {
	ext, err := parseExtension(v, "chunk_key_encoding")
	if err != nil {
		return ChunkKeyEncoding{}, err
	}
	var e ChunkKeyEncoding
	switch ext.Name {
	case "default":
		e = DefaultKeyEncoding
	case "v2":
		e = V2KeyEncoding
	default:
		return e, newError(ErrUnsupported, "chunk_key_encoding: %q is not supported", ext.Name)
	}
	var cfg struct {
		Separator *string `json:"separator"`
	}
	if ext.Configuration != nil {
		if err := json.Unmarshal(ext.Configuration, &cfg); err != nil {
			return e, newError(ErrInvalid, "chunk_key_encoding.configuration.separator: must be \"/\" or \".\"")
		}
	}
	if cfg.Separator != nil {
		if *cfg.Separator != "/" && *cfg.Separator != "." {
			return e, newError(ErrInvalid, "chunk_key_encoding.configuration.separator: must be \"/\" or \".\", not %q", *cfg.Separator)
		}
		e.Separator = (*cfg.Separator)[0]
	}
	return e, nil
}

func parseDimensionNames(v json.RawMessage) ([]string, error) {
	if isNull(v) {
		return nil, nil
	}
	var names []*string
	if err := json.Unmarshal(v, &names); err != nil {
		return nil, newError(ErrInvalid, "dimension_names: must be a list of strings or nulls")
	}
	out := make([]string, len(names))
	for i, n := range names {
		if n != nil {
			out[i] = *n
		}
	}
	return out, nil
}

// legacyShardingName reports whether a storage transformer names the v1
// sharding transformer (by its URI or short name).
func legacyShardingName(name string) bool {
	return name == "sharding" || name == "indexed" ||
		strings.Contains(name, "storage_transformers/sharding") || strings.Contains(name, "storage-transformers/sharding")
}

func (a *Array) parseStorageTransformers(v json.RawMessage) error {
	if isNull(v) {
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(v, &list); err != nil {
		return newError(ErrInvalid, "storage_transformers: must be a list")
	}
	for i, e := range list {
		field := "storage_transformers[" + strconv.Itoa(i) + "]"
		var o struct {
			Name           string          `json:"name"`
			Extension      string          `json:"extension"`
			Type           string          `json:"type"`
			Configuration  json.RawMessage `json:"configuration"`
			MustUnderstand *bool           `json:"must_understand"`
		}
		if isObject(e) {
			if err := json.Unmarshal(e, &o); err != nil {
				return newError(ErrInvalid, "%s: %v", field, err)
			}
		} else if err := json.Unmarshal(e, &o.Name); err != nil {
			return newError(ErrInvalid, "%s: must be a name or an object", field)
		}
		name := o.Name
		if name == "" {
			name = o.Extension
		}
		switch {
		case legacyShardingName(name):
			if o.Type != "" && o.Type != "indexed" {
				return newError(ErrUnsupported, "%s: sharding type %q is not supported", field, o.Type)
			}
			var cfg struct {
				ChunksPerShard json.RawMessage `json:"chunks_per_shard"`
			}
			if o.Configuration == nil || json.Unmarshal(o.Configuration, &cfg) != nil || cfg.ChunksPerShard == nil {
				return newError(ErrInvalid, "%s.configuration.chunks_per_shard: missing", field)
			}
			cps, err := parseShape(cfg.ChunksPerShard, field+".configuration.chunks_per_shard", true)
			if err != nil {
				return err
			}
			if a.LegacySharding != nil {
				return newError(ErrUnsupported, "%s: more than one sharding transformer", field)
			}
			a.LegacySharding = &LegacySharding{ChunksPerShard: cps}
		case o.MustUnderstand != nil && !*o.MustUnderstand:
		default:
			return newError(ErrUnsupported, "%s: storage transformer %q is not supported", field, name)
		}
		a.StorageTransformers = append(a.StorageTransformers, bytes.TrimSpace(e))
	}
	return nil
}

// EncodeV3 returns the array's zarr.json as zarr-python 3 writes it.
func (a *Array) EncodeV3() ([]byte, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	var w objWriter
	a.writeV3(&w)
	return w.bytes()
}

func (a *Array) writeV3(w *objWriter) {
	w.add("shape", nonNil(a.Shape))
	if a.dataTypeJSON != nil {
		w.raw("data_type", a.dataTypeJSON)
	} else if a.DataType.Kind == KindFixedBytes {
		w.add("data_type", map[string]any{"name": "null_terminated_bytes", "configuration": map[string]int{"length_bytes": a.DataType.Size}})
	} else if a.DataType.Kind == KindFixedUnicode {
		w.add("data_type", map[string]any{"name": "fixed_length_utf32", "configuration": map[string]int{"length_bytes": a.DataType.Size}})
	} else {
		w.add("data_type", a.DataType.Name)
	}
	w.add("chunk_grid", map[string]any{"name": "regular", "configuration": map[string]any{"chunk_shape": nonNil(a.ChunkShape)}})
	sep := string(a.ChunkKeyEncoding.Separator)
	w.add("chunk_key_encoding", map[string]any{"name": a.ChunkKeyEncoding.Name, "configuration": map[string]string{"separator": sep}})
	fill, err := EncodeFillValue(a.DataType, a.FillValue, a.FillNull)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.raw("fill_value", fill)
	w.add("codecs", a.Codecs)
	w.raw("attributes", attrsOrEmpty(a.Attributes))
	w.add("zarr_format", 3)
	w.add("node_type", "array")
	st := a.StorageTransformers
	if st == nil && a.LegacySharding != nil {
		st = []json.RawMessage{mustJSON(map[string]any{
			"extension":     "https://purl.org/zarr/spec/extensions/storage_transformers/sharding/1.0",
			"type":          "indexed",
			"configuration": map[string]any{"chunks_per_shard": a.LegacySharding.ChunksPerShard},
		})}
	}
	if st == nil {
		st = []json.RawMessage{}
	}
	w.add("storage_transformers", st)
	if len(a.DimensionNames) > 0 {
		names := make([]*string, len(a.DimensionNames))
		for i := range a.DimensionNames {
			if a.DimensionNames[i] != "" {
				names[i] = &a.DimensionNames[i]
			}
		}
		w.add("dimension_names", names)
	}
	writeExtensions(w, a.Extensions)
}

func writeExtensions(w *objWriter, ext map[string]json.RawMessage) {
	keys := make([]string, 0, len(ext))
	for k := range ext {
		keys = append(keys, k)
	}
	sortStrings(keys)
	for _, k := range keys {
		w.raw(k, ext[k])
	}
}

func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func attrsOrEmpty(a json.RawMessage) json.RawMessage {
	if a == nil {
		return json.RawMessage("{}")
	}
	return a
}

// EncodeV3 returns the group's zarr.json as zarr-python 3 writes it, with
// its consolidated metadata inline when Consolidated is set.
func (g *Group) EncodeV3() ([]byte, error) {
	var w objWriter
	w.raw("attributes", attrsOrEmpty(g.Attributes))
	w.add("zarr_format", 3)
	if g.Consolidated != nil {
		cm, err := encodeV3Consolidated(g.Consolidated)
		if err != nil {
			return nil, err
		}
		w.raw("consolidated_metadata", cm)
	}
	w.add("node_type", "group")
	writeExtensions(&w, g.Extensions)
	return w.bytes()
}

func encodeV3Consolidated(nodes map[string]Node) (json.RawMessage, error) {
	var md objWriter
	paths := make([]string, 0, len(nodes))
	for p := range nodes {
		paths = append(paths, p)
	}
	sortStrings(paths)
	for _, p := range paths {
		doc, err := nodes[p].EncodeV3()
		if err != nil {
			return nil, wrapError(ErrInvalid, err, "consolidated metadata %q", p)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, doc); err != nil {
			return nil, wrapError(ErrInternal, err, "consolidated metadata %q", p)
		}
		md.raw(p, c.Bytes())
	}
	if md.buf.Len() == 0 {
		md.buf.WriteByte('{')
	}
	md.buf.WriteByte('}')
	var w objWriter
	w.add("kind", "inline")
	w.add("must_understand", false)
	w.raw("metadata", md.buf.Bytes())
	w.buf.WriteByte('}')
	return w.buf.Bytes(), nil
}

// EncodeV3 encodes whichever of the array or group is set.
func (n Node) EncodeV3() ([]byte, error) {
	switch {
	case n.Array != nil:
		return n.Array.EncodeV3()
	case n.Group != nil:
		return n.Group.EncodeV3()
	}
	return nil, newError(ErrInvalid, "node: neither array nor group")
}
