package zarr

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// ParseV2DataType parses a numpy typestring as v2 metadata writes it
// ("<f4", ">i8", "|b1", "|S8", "<U4", "|V16"), returning the data type and
// whether the stored byte order is big-endian. "|O" (object) is not a type
// by itself: ParseV2Array resolves it with the array's vlen filter.
func ParseV2DataType(s string) (DataType, bool, error) {
	if len(s) < 2 {
		return DataType{}, false, newError(ErrInvalid, "dtype: %q is not a numpy typestring", s)
	}
	order, kind, num := s[0], s[1], s[2:]
	switch order {
	case '<', '>', '|', '=':
	default:
		return DataType{}, false, newError(ErrInvalid, "dtype: %q is not a numpy typestring", s)
	}
	big := order == '>'
	n := 0
	if num != "" {
		var err error
		n, err = strconv.Atoi(num)
		if err != nil || n < 0 || 4*n > MaxElementSize {
			return DataType{}, false, newError(ErrInvalid, "dtype: %q is not a numpy typestring", s)
		}
	}
	var name string
	switch kind {
	case 'b':
		if n == 1 {
			name = "bool"
		}
	case 'i':
		if n == 1 || n == 2 || n == 4 || n == 8 {
			name = "int" + strconv.Itoa(8*n)
		}
	case 'u':
		if n == 1 || n == 2 || n == 4 || n == 8 {
			name = "uint" + strconv.Itoa(8*n)
		}
	case 'f':
		if n == 2 || n == 4 || n == 8 {
			name = "float" + strconv.Itoa(8*n)
		}
	case 'c':
		if n == 8 || n == 16 {
			name = "complex" + strconv.Itoa(8*n)
		}
	case 'S':
		if n > 0 {
			return DataType{Name: "S" + num, Kind: KindFixedBytes, Size: n}, big, nil
		}
	case 'U':
		if n > 0 {
			return DataType{Name: "U" + num, Kind: KindFixedUnicode, Size: 4 * n}, big, nil
		}
	case 'V':
		if n > 0 {
			return DataType{Name: "r" + strconv.Itoa(8*n), Kind: KindRaw, Size: n}, false, nil
		}
	case 'O':
		return DataType{}, false, newError(ErrInvalid, "dtype: %q needs a vlen-utf8 or vlen-bytes filter", s)
	}
	if name == "" {
		return DataType{}, false, newError(ErrUnsupported, "dtype: %q is not supported", s)
	}
	d := coreTypes[name]
	return d, big && d.SwapUnit() > 1, nil
}

// V2TypeString is the numpy typestring of d with the given byte order, as
// v2 metadata writes it; string and bytes are "|O".
func V2TypeString(d DataType, bigEndian bool) (string, error) {
	order := "<"
	if bigEndian {
		order = ">"
	}
	if d.SwapUnit() == 1 {
		order = "|"
	}
	switch d.Kind {
	case KindBool:
		return "|b1", nil
	case KindInt:
		return order + "i" + strconv.Itoa(d.Size), nil
	case KindUint:
		return order + "u" + strconv.Itoa(d.Size), nil
	case KindFloat:
		return order + "f" + strconv.Itoa(d.Size), nil
	case KindComplex:
		return order + "c" + strconv.Itoa(d.Size), nil
	case KindRaw:
		return "|V" + strconv.Itoa(d.Size), nil
	case KindFixedBytes:
		return "|S" + strconv.Itoa(d.Size), nil
	case KindFixedUnicode:
		return order + "U" + strconv.Itoa(d.Size/4), nil
	case KindString, KindBytes:
		return "|O", nil
	}
	return "", newError(ErrUnsupported, "dtype: data type %q has no v2 form", d.Name)
}

// v2Codec is a numcodecs configuration: an id and its other members.
type v2Codec struct {
	ID     string
	Config json.RawMessage // the object without "id"
	raw    json.RawMessage
}

func parseV2Codec(v json.RawMessage, field string) (v2Codec, error) {
	members, err := parseObject(v, field)
	if err != nil {
		return v2Codec{}, err
	}
	var c v2Codec
	var w objWriter
	for _, kv := range members {
		if kv.Key == "id" {
			if err := json.Unmarshal(kv.Value, &c.ID); err != nil || c.ID == "" {
				return c, newError(ErrInvalid, "%s.id: must be a non-empty string", field)
			}
			continue
		}
		w.raw(kv.Key, kv.Value)
	}
	if c.ID == "" {
		return c, newError(ErrInvalid, "%s.id: missing", field)
	}
	if w.buf.Len() == 0 {
		w.buf.WriteByte('{')
	}
	w.buf.WriteByte('}')
	c.Config = w.buf.Bytes()
	c.raw = v
	return c, nil
}

// v3FromV2 converts one numcodecs configuration to its normalised CodecSpec.
func v3FromV2(c v2Codec, d DataType, field string) (CodecSpec, error) {
	var num map[string]any
	_ = decodeNumber(c.Config, &num)
	intOr := func(key string, def int64) (int64, error) {
		x, ok := num[key]
		if !ok {
			return def, nil
		}
		n, _ := x.(json.Number)
		v, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return 0, newError(ErrInvalid, "%s.%s: must be an integer", field, key)
		}
		return v, nil
	}
	switch c.ID {
	case "blosc":
		var cfg struct {
			Cname string `json:"cname"`
		}
		_ = json.Unmarshal(c.Config, &cfg)
		if cfg.Cname == "" {
			cfg.Cname = "lz4"
		}
		clevel, err := intOr("clevel", 5)
		if err != nil {
			return CodecSpec{}, err
		}
		shuffle, err := intOr("shuffle", 1)
		if err != nil {
			return CodecSpec{}, err
		}
		blocksize, err := intOr("blocksize", 0)
		if err != nil {
			return CodecSpec{}, err
		}
		typesize := max(d.Size, 1)
		var sh string
		switch shuffle {
		case 0:
			sh = "noshuffle"
		case 1:
			sh = "shuffle"
		case 2:
			sh = "bitshuffle"
		case -1:
			sh = "shuffle"
			if typesize == 1 {
				sh = "bitshuffle"
			}
		default:
			return CodecSpec{}, newError(ErrInvalid, "%s.shuffle: must be -1, 0, 1 or 2", field)
		}
		var w objWriter
		w.add("cname", cfg.Cname)
		w.add("clevel", clevel)
		w.add("shuffle", sh)
		w.add("typesize", typesize)
		w.add("blocksize", blocksize)
		w.buf.WriteByte('}')
		return CodecSpec{Name: "blosc", Configuration: w.buf.Bytes()}, nil
	case "gzip":
		level, err := intOr("level", 1)
		if err != nil {
			return CodecSpec{}, err
		}
		return CodecSpec{Name: "gzip", Configuration: mustJSON(map[string]int64{"level": level})}, nil
	case "zstd":
		level, err := intOr("level", 1)
		if err != nil {
			return CodecSpec{}, err
		}
		var cfg struct {
			Checksum bool `json:"checksum"`
		}
		_ = json.Unmarshal(c.Config, &cfg)
		var w objWriter
		w.add("level", level)
		w.add("checksum", cfg.Checksum)
		w.buf.WriteByte('}')
		return CodecSpec{Name: "zstd", Configuration: w.buf.Bytes()}, nil
	case "vlen-utf8", "vlen-bytes":
		return CodecSpec{Name: c.ID}, nil
	}
	name := "numcodecs." + c.ID
	if ClassOf(name) == CodecUnknown {
		return CodecSpec{}, newError(ErrUnsupported, "%s: codec %q is not supported", field, c.ID)
	}
	return CodecSpec{Name: name, Configuration: c.Config}, nil
}

// v2FromV3 converts a normalised CodecSpec back to a numcodecs configuration.
func v2FromV3(c CodecSpec, field string) (json.RawMessage, error) {
	var w objWriter
	switch c.Name {
	case "blosc":
		var cfg struct {
			Cname     string `json:"cname"`
			Clevel    int    `json:"clevel"`
			Shuffle   string `json:"shuffle"`
			Blocksize int    `json:"blocksize"`
		}
		if err := json.Unmarshal(c.Configuration, &cfg); err != nil {
			return nil, newError(ErrInvalid, "%s: blosc configuration: %v", field, err)
		}
		sh := map[string]int{"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
		s, ok := sh[cfg.Shuffle]
		if !ok {
			return nil, newError(ErrInvalid, "%s: blosc shuffle %q", field, cfg.Shuffle)
		}
		w.add("blocksize", cfg.Blocksize)
		w.add("clevel", cfg.Clevel)
		w.add("cname", cfg.Cname)
		w.add("id", "blosc")
		w.add("shuffle", s)
	case "gzip", "zstd":
		var cfg struct {
			Level    int  `json:"level"`
			Checksum bool `json:"checksum"`
		}
		_ = json.Unmarshal(c.Configuration, &cfg)
		if cfg.Checksum {
			w.add("checksum", true)
		}
		w.add("id", c.Name)
		w.add("level", cfg.Level)
	case "vlen-utf8", "vlen-bytes":
		w.add("id", c.Name)
	default:
		id, ok := strings.CutPrefix(c.Name, "numcodecs.")
		if !ok {
			return nil, newError(ErrUnsupported, "%s: codec %q has no v2 form", field, c.Name)
		}
		w.add("id", id)
		if len(c.Configuration) > 0 {
			members, err := parseObject(c.Configuration, field)
			if err != nil {
				return nil, err
			}
			for _, kv := range members {
				if kv.Key != "id" {
					w.raw(kv.Key, kv.Value)
				}
			}
		}
	}
	w.buf.WriteByte('}')
	return w.buf.Bytes(), w.err
}

// ParseV2Array parses a v2 .zarray and its .zattrs (nil or empty when
// absent) into the common model, NCZarr metadata included in both the
// lower-case (.zattrs) and the netCDF 4.9.0 upper-case (_NCZARR_ARRAY in
// .zarray, _NCZARR_ATTR in .zattrs) forms.
func ParseV2Array(zarray, zattrs []byte) (*Array, error) {
	members, err := parseObject(zarray, ".zarray")
	if err != nil {
		return nil, err
	}
	m := make(map[string]json.RawMessage, len(members))
	for _, kv := range members {
		m[kv.Key] = kv.Value
	}
	var format int
	if err := json.Unmarshal(m["zarr_format"], &format); err != nil || format != 2 {
		return nil, newError(ErrInvalid, "zarr_format: must be 2, not %s", orMissing(m["zarr_format"]))
	}
	for _, req := range []string{"shape", "chunks", "dtype", "compressor", "fill_value", "order", "filters"} {
		if _, ok := m[req]; !ok && req != "filters" {
			return nil, newError(ErrInvalid, "%s: missing", req)
		}
	}
	a := &Array{ZarrFormat: 2, ChunkKeyEncoding: V2KeyEncoding}
	var nc ncArrayRaw
	for _, kv := range members {
		switch kv.Key {
		case "zarr_format", "dtype", "compressor", "filters", "order", "fill_value":
		case "shape":
			a.Shape, err = parseShape(kv.Value, "shape", false)
		case "chunks":
			a.ChunkShape, err = parseShape(kv.Value, "chunks", true)
		case "dimension_separator":
			var sep string
			if !isNull(kv.Value) {
				if json.Unmarshal(kv.Value, &sep) != nil || (sep != "." && sep != "/") {
					return nil, newError(ErrInvalid, "dimension_separator: must be \".\" or \"/\"")
				}
				a.ChunkKeyEncoding.Separator = sep[0]
			}
		case "_NCZARR_ARRAY", "_nczarr_array":
			nc.array = kv.Value
		default:
			if a.Extensions == nil {
				a.Extensions = map[string]json.RawMessage{}
			}
			a.Extensions[kv.Key] = kv.Value
		}
		if err != nil {
			return nil, err
		}
	}
	// dtype, with |O resolved by the vlen filter.
	var dtype string
	if err := json.Unmarshal(m["dtype"], &dtype); err != nil {
		if bytes.HasPrefix(bytes.TrimSpace(m["dtype"]), []byte("[")) {
			return nil, newError(ErrUnsupported, "dtype: structured dtypes are not supported")
		}
		return nil, newError(ErrInvalid, "dtype: must be a numpy typestring")
	}
	var filters []v2Codec
	if f := m["filters"]; f != nil && !isNull(f) {
		var list []json.RawMessage
		if err := json.Unmarshal(f, &list); err != nil {
			return nil, newError(ErrInvalid, "filters: must be null or a list of codecs")
		}
		for i, e := range list {
			c, err := parseV2Codec(e, "filters["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			filters = append(filters, c)
		}
	}
	var compressor *v2Codec
	if c := m["compressor"]; !isNull(c) {
		cc, err := parseV2Codec(c, "compressor")
		if err != nil {
			return nil, err
		}
		compressor = &cc
	}
	var big bool
	if len(dtype) >= 2 && dtype[1] == 'O' && (dtype[0] == '|' || dtype[0] == '<' || dtype[0] == '>' || dtype[0] == '=') && len(dtype) == 2 {
		for _, f := range filters {
			switch f.ID {
			case "vlen-utf8":
				a.DataType = MustDataType("string")
			case "vlen-bytes":
				a.DataType = MustDataType("bytes")
			case "vlen-array", "json2", "pickle", "msgpack2":
				return nil, newError(ErrUnsupported, "filters: object codec %q is not supported", f.ID)
			}
		}
		if a.DataType.Kind == 0 {
			return nil, newError(ErrInvalid, "dtype: \"|O\" needs a vlen-utf8 or vlen-bytes filter")
		}
	} else {
		a.DataType, big, err = ParseV2DataType(dtype)
		if err != nil {
			return nil, err
		}
	}
	a.FillValue, a.FillNull, err = ParseFillValueV2(a.DataType, m["fill_value"])
	if err != nil {
		return nil, err
	}
	// order, then filters and compressor, as one chain.
	var order string
	if err := json.Unmarshal(m["order"], &order); err != nil || (order != "C" && order != "F") {
		return nil, newError(ErrInvalid, "order: must be \"C\" or \"F\", not %s", orMissing(m["order"]))
	}
	if order == "F" && len(a.Shape) > 1 {
		perm := make([]int, len(a.Shape))
		for i := range perm {
			perm[i] = len(perm) - 1 - i
		}
		a.Codecs = append(a.Codecs, CodecSpec{Name: "transpose", Configuration: mustJSON(map[string][]int{"order": perm})})
	}
	serializer := CodecSpec{Name: "bytes"}
	if a.DataType.SwapUnit() > 1 {
		endian := "little"
		if big {
			endian = "big"
		}
		serializer.Configuration = mustJSON(map[string]string{"endian": endian})
	}
	placed := false
	for i, f := range filters {
		c, err := v3FromV2(f, a.DataType, "filters["+strconv.Itoa(i)+"]")
		if err != nil {
			return nil, err
		}
		if ClassOf(c.Name) == ArrayToBytes {
			if placed {
				return nil, newError(ErrInvalid, "filters[%d]: a second object codec %q", i, f.ID)
			}
			placed = true
		} else if ClassOf(c.Name) == BytesToBytes && !placed {
			a.Codecs = append(a.Codecs, serializer)
			placed = true
		}
		a.Codecs = append(a.Codecs, c)
	}
	if !placed {
		a.Codecs = append(a.Codecs, serializer)
	}
	if compressor != nil {
		c, err := v3FromV2(*compressor, a.DataType, "compressor")
		if err != nil {
			return nil, err
		}
		a.Codecs = append(a.Codecs, c)
	}
	if err := a.applyV2Attrs(zattrs, nc); err != nil {
		return nil, err
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// EncodeV2 returns the array's .zarray and .zattrs as zarr-python 2 writes
// them (zattrs is "{}" when there are no attributes). NCZarr metadata is
// written in the lower-case form into .zattrs when NCZarr is set (or in
// netCDF 4.9.0's, partly into .zarray, when NCZarr.Legacy is); named
// dimensions become xarray's _ARRAY_DIMENSIONS. The codec chain must be
// expressible in v2: an optional leading transpose reversing the
// dimensions (order "F"), array->array numcodecs filters, "bytes" or a vlen
// codec, then bytes->bytes codecs, the last of them a compressor.
func (a *Array) EncodeV2() (zarray, zattrs []byte, err error) {
	if err := a.validate(); err != nil {
		return nil, nil, err
	}
	if a.LegacySharding != nil {
		return nil, nil, newError(ErrUnsupported, "storage_transformers: sharding has no v2 form")
	}
	shape, chunks := a.Shape, a.ChunkShape
	scalar := len(shape) == 0
	if scalar {
		shape, chunks = []int64{1}, []int64{1}
	}
	codecs := a.Codecs
	order := "C"
	if len(codecs) > 0 && codecs[0].Name == "transpose" {
		var cfg struct {
			Order []int `json:"order"`
		}
		_ = json.Unmarshal(codecs[0].Configuration, &cfg)
		for i, o := range cfg.Order {
			if o != len(cfg.Order)-1-i {
				return nil, nil, newError(ErrUnsupported, "codecs[0]: transpose order %v has no v2 form", cfg.Order)
			}
		}
		if len(cfg.Order) > 1 {
			order = "F"
		}
		codecs = codecs[1:]
	}
	big := false
	var filters []json.RawMessage
	var tail []CodecSpec
	for i, c := range codecs {
		field := "codecs[" + strconv.Itoa(i) + "]"
		switch {
		case c.Name == "bytes":
			var cfg struct {
				Endian string `json:"endian"`
			}
			_ = json.Unmarshal(c.Configuration, &cfg)
			big = cfg.Endian == "big"
		case c.Name == "sharding_indexed" || c.Name == "transpose" || c.Name == "crc32c":
			return nil, nil, newError(ErrUnsupported, "%s: codec %q has no v2 form", field, c.Name)
		case ClassOf(c.Name) == BytesToBytes:
			tail = append(tail, c)
		default:
			f, err := v2FromV3(c, field)
			if err != nil {
				return nil, nil, err
			}
			filters = append(filters, f)
		}
	}
	var compressor json.RawMessage = json.RawMessage("null")
	for i, c := range tail {
		f, err := v2FromV3(c, "codecs")
		if err != nil {
			return nil, nil, err
		}
		id, _ := strings.CutPrefix(c.Name, "numcodecs.")
		if i == len(tail)-1 && v2Compressors[id] {
			compressor = f
		} else {
			filters = append(filters, f)
		}
	}
	dtype, err := V2TypeString(a.DataType, big)
	if err != nil {
		return nil, nil, err
	}
	fill, err := EncodeFillValueV2(a.DataType, a.FillValue, a.FillNull)
	if err != nil {
		return nil, nil, err
	}
	w := objWriter{indent: "    "}
	w.add("chunks", chunks)
	w.raw("compressor", compressor)
	w.add("dimension_separator", string(a.ChunkKeyEncoding.Separator))
	w.add("dtype", dtype)
	w.raw("fill_value", fill)
	if filters == nil {
		w.raw("filters", json.RawMessage("null"))
	} else {
		w.add("filters", filters)
	}
	w.add("order", order)
	w.add("shape", shape)
	w.add("zarr_format", 2)
	writeExtensions(&w, a.Extensions)
	if err := a.encodeV2Legacy(&w); err != nil {
		return nil, nil, err
	}
	zarray, err = w.bytes()
	if err != nil {
		return nil, nil, err
	}
	zattrs, err = a.encodeV2Attrs()
	return zarray, zattrs, err
}

// ParseV2Group parses a v2 .zgroup and its .zattrs (nil or empty when
// absent), NCZarr metadata included in both forms.
func ParseV2Group(zgroup, zattrs []byte) (*Group, error) {
	members, err := parseObject(zgroup, ".zgroup")
	if err != nil {
		return nil, err
	}
	g := &Group{ZarrFormat: 2}
	var nc ncGroupRaw
	seenFormat := false
	for _, kv := range members {
		switch kv.Key {
		case "zarr_format":
			var format int
			if err := json.Unmarshal(kv.Value, &format); err != nil || format != 2 {
				return nil, newError(ErrInvalid, "zarr_format: must be 2, not %s", orMissing(kv.Value))
			}
			seenFormat = true
		case "_NCZARR_SUPERBLOCK", "_nczarr_superblock":
			nc.superblock = kv.Value
		case "_NCZARR_GROUP", "_nczarr_group":
			nc.group = kv.Value
		default:
			if g.Extensions == nil {
				g.Extensions = map[string]json.RawMessage{}
			}
			g.Extensions[kv.Key] = kv.Value
		}
	}
	if !seenFormat {
		return nil, newError(ErrInvalid, "zarr_format: missing")
	}
	if err := g.applyV2Attrs(zattrs, nc); err != nil {
		return nil, err
	}
	return g, nil
}

// EncodeV2 returns the group's .zgroup and .zattrs; NCZarr metadata goes
// into .zattrs in the lower-case form when NCZarr is set (into .zgroup in
// netCDF 4.9.0's upper-case form when NCZarr.Legacy is).
func (g *Group) EncodeV2() (zgroup, zattrs []byte, err error) {
	w := objWriter{indent: "    "}
	w.add("zarr_format", 2)
	writeExtensions(&w, g.Extensions)
	g.encodeV2Legacy(&w)
	zgroup, err = w.bytes()
	if err != nil {
		return nil, nil, err
	}
	zattrs, err = g.encodeV2Attrs()
	return zgroup, zattrs, err
}

// ParseV2Consolidated parses a consolidated .zmetadata document into its
// nodes, by path ("" for the root, "a/b" below it).
func ParseV2Consolidated(data []byte) (map[string]Node, error) {
	var doc struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
		Format   *int                       `json:"zarr_consolidated_format"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, newError(ErrInvalid, ".zmetadata: %v", err)
	}
	if doc.Format == nil || *doc.Format != 1 {
		return nil, newError(ErrInvalid, "zarr_consolidated_format: must be 1")
	}
	out := map[string]Node{}
	for key, v := range doc.Metadata {
		dir, base := splitMetaKey(key)
		attrs := doc.Metadata[joinMetaKey(dir, ".zattrs")]
		var n Node
		var err error
		switch base {
		case ".zarray":
			n.Array, err = ParseV2Array(v, attrs)
		case ".zgroup":
			n.Group, err = ParseV2Group(v, attrs)
		case ".zattrs":
			continue
		default:
			continue
		}
		if err != nil {
			return nil, wrapError(ErrInvalid, err, ".zmetadata: %q", key)
		}
		out[dir] = n
	}
	return out, nil
}

func splitMetaKey(key string) (dir, base string) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}

func joinMetaKey(dir, base string) string {
	if dir == "" {
		return base
	}
	return dir + "/" + base
}

// EncodeV2Consolidated returns a .zmetadata document for nodes by path ("" is
// the root), as zarr-python 2 writes it.
func EncodeV2Consolidated(nodes map[string]Node) ([]byte, error) {
	var md objWriter
	paths := make([]string, 0, len(nodes))
	for p := range nodes {
		paths = append(paths, p)
	}
	sortStrings(paths)
	type entry struct {
		key string
		doc []byte
	}
	var entries []entry
	for _, p := range paths {
		n := nodes[p]
		var meta, attrs []byte
		var err error
		base := ".zgroup"
		switch {
		case n.Array != nil:
			meta, attrs, err = n.Array.EncodeV2()
			base = ".zarray"
		case n.Group != nil:
			meta, attrs, err = n.Group.EncodeV2()
		default:
			err = newError(ErrInvalid, "node %q: neither array nor group", p)
		}
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{joinMetaKey(p, base), meta})
		if string(attrs) != "{}" {
			entries = append(entries, entry{joinMetaKey(p, ".zattrs"), attrs})
		}
	}
	slicesSortEntries := func() {
		for i := 1; i < len(entries); i++ {
			for j := i; j > 0 && entries[j].key < entries[j-1].key; j-- {
				entries[j], entries[j-1] = entries[j-1], entries[j]
			}
		}
	}
	slicesSortEntries()
	for _, e := range entries {
		var c bytes.Buffer
		_ = json.Compact(&c, e.doc)
		md.raw(e.key, c.Bytes())
	}
	if md.buf.Len() == 0 {
		md.buf.WriteByte('{')
	}
	md.buf.WriteByte('}')
	w := objWriter{indent: "    "}
	w.raw("metadata", md.buf.Bytes())
	w.add("zarr_consolidated_format", 1)
	return w.bytes()
}
