package zarr

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return reflect.DeepEqual(x, y)
}

// roundTripV3 checks parse -> encode -> parse gives the same model.
func roundTripV3(t *testing.T, n Node) {
	t.Helper()
	doc, err := n.EncodeV3()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	n2, err := ParseV3(doc)
	if err != nil {
		t.Fatalf("reparse: %v\n%s", err, doc)
	}
	if n.Array != nil && n.Array.ZarrFormat == 2 {
		c := *n.Array
		c.ZarrFormat = 3
		c.NCZarr = nil
		n = Node{Array: &c}
	}
	if !reflect.DeepEqual(normNode(n), normNode(n2)) {
		t.Fatalf("round trip differs:\n%+v\n%+v\n%s", n.Array, n2.Array, doc)
	}
}

// normNode compacts raw JSON so that whitespace does not matter.
func normNode(n Node) Node {
	compact := func(r json.RawMessage) json.RawMessage {
		if r == nil {
			return nil
		}
		var b bytes.Buffer
		_ = json.Compact(&b, r)
		return b.Bytes()
	}
	if a := n.Array; a != nil {
		c := *a
		c.Attributes = compact(c.Attributes)
		if string(c.Attributes) == "{}" {
			c.Attributes = nil
		}
		c.dataTypeJSON = nil
		c.StorageTransformers = nil
		if len(c.Extensions) == 0 {
			c.Extensions = nil
		}
		if a.Extensions != nil {
			c.Extensions = map[string]json.RawMessage{}
			for k, v := range a.Extensions {
				c.Extensions[k] = compact(v)
			}
		}
		c.Codecs = append([]CodecSpec(nil), a.Codecs...)
		for i := range c.Codecs {
			c.Codecs[i].Configuration = compact(c.Codecs[i].Configuration)
			if string(c.Codecs[i].Configuration) == "{}" {
				c.Codecs[i].Configuration = nil
			}
		}
		return Node{Array: &c}
	}
	if g := n.Group; g != nil {
		c := *g
		c.Attributes = compact(c.Attributes)
		if string(c.Attributes) == "{}" {
			c.Attributes = nil
		}
		if g.Consolidated != nil {
			c.Consolidated = map[string]Node{}
			for k, v := range g.Consolidated {
				c.Consolidated[k] = normNode(v)
			}
		}
		return Node{Group: &c}
	}
	return n
}

func TestParseV3SpecExample(t *testing.T) {
	n, err := ParseV3(readTestdata(t, "v3_spec_array.json"))
	if err != nil {
		t.Fatal(err)
	}
	a := n.Array
	if a == nil || n.Group != nil {
		t.Fatal("want an array")
	}
	if !reflect.DeepEqual(a.Shape, []int64{10000, 1000}) || !reflect.DeepEqual(a.ChunkShape, []int64{1000, 100}) {
		t.Errorf("shape %v chunks %v", a.Shape, a.ChunkShape)
	}
	if a.DataType != MustDataType("float64") {
		t.Errorf("data type %v", a.DataType)
	}
	if getUint(a.FillValue) != nan64 {
		t.Errorf("fill %x", a.FillValue)
	}
	if !reflect.DeepEqual(a.DimensionNames, []string{"rows", "columns"}) {
		t.Errorf("dimension names %v", a.DimensionNames)
	}
	if got := a.NumChunks(); got != 100 {
		t.Errorf("chunks %d", got)
	}
	if !jsonEqual(t, a.Attributes, []byte(`{"foo": 42, "bar": "apples", "baz": [1, 2, 3, 4]}`)) {
		t.Errorf("attributes %s", a.Attributes)
	}
	if got := a.ChunkKey("foo/bar", []int64{1, 23}); got != "foo/bar/c/1/23" {
		t.Errorf("key %s", got)
	}
	roundTripV3(t, n)
}

func TestParseV3ZarrPython3(t *testing.T) {
	for _, name := range []string{"v3_zarrpy3_array.json", "v3_zarrpy3_string.json", "v3_zarrpy3_sharded.json", "v3_legacy_sharding.json", "v3_zarrpy3_consolidated.json"} {
		t.Run(name, func(t *testing.T) {
			n, err := ParseV3(readTestdata(t, name))
			if err != nil {
				t.Fatal(err)
			}
			roundTripV3(t, n)
		})
	}
}

func TestV3Details(t *testing.T) {
	n, err := ParseV3(readTestdata(t, "v3_zarrpy3_array.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Attributes are kept verbatim.
	if !strings.Contains(string(n.Array.Attributes), `"nested": {"a": [1.5, null, true]}`) {
		t.Errorf("attributes not verbatim: %s", n.Array.Attributes)
	}
	doc, _ := n.EncodeV3()
	if !jsonEqual(t, doc, readTestdata(t, "v3_zarrpy3_array.json")) {
		t.Errorf("encode differs from zarr-python 3's document:\n%s", doc)
	}

	n, _ = ParseV3(readTestdata(t, "v3_zarrpy3_string.json"))
	if n.Array.DataType.Kind != KindString || n.Array.FillValue == nil || len(n.Array.FillValue) != 0 {
		t.Errorf("string: %+v", n.Array)
	}

	n, _ = ParseV3(readTestdata(t, "v3_zarrpy3_sharded.json"))
	if !reflect.DeepEqual(n.Array.DimensionNames, []string{"y", ""}) {
		t.Errorf("dimension names %q", n.Array.DimensionNames)
	}

	n, _ = ParseV3(readTestdata(t, "v3_legacy_sharding.json"))
	ls := n.Array.LegacySharding
	if ls == nil || !reflect.DeepEqual(ls.ChunksPerShard, []int64{2, 5}) || ls.IndexSize() != 160 {
		t.Fatalf("legacy sharding %+v", ls)
	}
	shard, entry := ls.Locate([]int64{3, 7})
	if !reflect.DeepEqual(shard, []int64{1, 1}) || entry != 1*5+2 {
		t.Errorf("locate: %v %d", shard, entry)
	}

	n, _ = ParseV3(readTestdata(t, "v3_zarrpy3_consolidated.json"))
	cm := n.Group.Consolidated
	if len(cm) != 3 || cm["a"].Array == nil || cm["g"].Group == nil || cm["g/b"].Array == nil {
		t.Fatalf("consolidated: %+v", cm)
	}
	b := cm["g/b"].Array
	if b.ChunkKeyEncoding != V2KeyEncoding || b.ChunkKey("g/b", []int64{1, 0}) != "g/b/1.0" {
		t.Errorf("v2 key encoding: %+v", b.ChunkKeyEncoding)
	}
	re := math.Float32frombits(uint32(getUint(b.FillValue[:4])))
	im := math.Float32frombits(uint32(getUint(b.FillValue[4:])))
	if re != 1 || !math.IsInf(float64(im), -1) {
		t.Errorf("complex fill %v %v", re, im)
	}
}

func TestV3ShortHandAndExtensions(t *testing.T) {
	doc := `{"zarr_format": 3, "node_type": "array", "shape": [128], "data_type": "string",
	  "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
	  "codecs": ["vlen-utf8", {"name": "zstd", "configuration": {"level": 1}}],
	  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32]}},
	  "fill_value": "", "dimension_names": ["x"], "attributes": {},
	  "my_ext": {"must_understand": false, "hello": 1}}`
	n, err := ParseV3([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a := n.Array
	if a.Codecs[0].Name != "vlen-utf8" || a.Codecs[0].Configuration != nil {
		t.Errorf("short-hand codec: %+v", a.Codecs[0])
	}
	if a.ChunkKey("", []int64{3}) != "c.3" {
		t.Errorf("key %s", a.ChunkKey("", []int64{3}))
	}
	if _, ok := a.Extensions["my_ext"]; !ok {
		t.Fatal("extension not kept")
	}
	out, err := a.EncodeV3()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"my_ext"`) {
		t.Errorf("extension not written back:\n%s", out)
	}
	roundTripV3(t, n)
}

func TestParseV3Errors(t *testing.T) {
	base := map[string]any{
		"zarr_format": 3, "node_type": "array", "shape": []int{4}, "data_type": "int16",
		"chunk_grid":         map[string]any{"name": "regular", "configuration": map[string]any{"chunk_shape": []int{2}}},
		"chunk_key_encoding": map[string]any{"name": "default"},
		"fill_value":         0,
		"codecs":             []any{map[string]any{"name": "bytes", "configuration": map[string]any{"endian": "little"}}},
	}
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for a, b := range base {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	tests := []struct {
		name string
		doc  []byte
		kind *ErrorKind
		want string
	}{
		{"not json", []byte("{"), ErrInvalid, "zarr.json"},
		{"format", with("zarr_format", 2), ErrInvalid, "zarr_format"},
		{"node type", with("node_type", "table"), ErrInvalid, "node_type"},
		{"no shape", with("shape", nil), ErrInvalid, "shape"},
		{"negative shape", with("shape", []int{-1}), ErrInvalid, "shape"},
		{"unknown dtype", with("data_type", "datetime64"), ErrUnsupported, "datetime64"},
		{"unknown grid", with("chunk_grid", "rectilinear"), ErrUnsupported, "rectilinear"},
		{"zero chunk", with("chunk_grid", map[string]any{"name": "regular", "configuration": map[string]any{"chunk_shape": []int{0}}}), ErrInvalid, "chunk_shape"},
		{"grid rank", with("chunk_grid", map[string]any{"name": "regular", "configuration": map[string]any{"chunk_shape": []int{1, 1}}}), ErrInvalid, "chunk_shape"},
		{"separator", with("chunk_key_encoding", map[string]any{"name": "default", "configuration": map[string]any{"separator": "-"}}), ErrInvalid, "separator"},
		{"unknown key encoding", with("chunk_key_encoding", "fancy"), ErrUnsupported, "fancy"},
		{"fill range", with("fill_value", 70000), ErrInvalid, "fill_value"},
		{"fill type", with("fill_value", "x"), ErrInvalid, "fill_value"},
		{"no fill", with("fill_value", nil), ErrInvalid, "fill_value"},
		{"unknown codec", with("codecs", []any{map[string]any{"name": "bytes", "configuration": map[string]any{"endian": "little"}}, "lzfse"}), ErrUnsupported, "lzfse"},
		{"no serializer", with("codecs", []any{"gzip"}), ErrInvalid, "codecs"},
		{"codec order", with("codecs", []any{map[string]any{"name": "gzip"}, map[string]any{"name": "bytes", "configuration": map[string]any{"endian": "little"}}}), ErrInvalid, "codecs[1]"},
		{"bad endian", with("codecs", []any{map[string]any{"name": "bytes", "configuration": map[string]any{"endian": "middle"}}}), ErrInvalid, "endian"},
		{"unknown member", with("surprise", 1), ErrUnsupported, "surprise"},
		{"unknown member must understand", with("surprise", map[string]any{"must_understand": true}), ErrUnsupported, "surprise"},
		{"dimension names", with("dimension_names", []any{"a", "b"}), ErrInvalid, "dimension_names"},
		{"attributes", with("attributes", []int{1}), ErrInvalid, "attributes"},
		{"storage transformer", with("storage_transformers", []any{map[string]any{"name": "crypt"}}), ErrUnsupported, "crypt"},
		{"configuration", with("data_type", map[string]any{"name": "int16", "configuration": 3}), ErrInvalid, "configuration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseV3(tc.doc)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("kind: %v, want %v", err, tc.kind)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %q does not name %q", err, tc.want)
			}
		})
	}
}

func TestChunkKeys(t *testing.T) {
	tests := []struct {
		enc    ChunkKeyEncoding
		prefix string
		coords []int64
		want   string
	}{
		{DefaultKeyEncoding, "", []int64{1, 23, 45}, "c/1/23/45"},
		{ChunkKeyEncoding{"default", '.'}, "", []int64{1, 23, 45}, "c.1.23.45"},
		{DefaultKeyEncoding, "a/b", nil, "a/b/c"},
		{DefaultKeyEncoding, "a/b/", []int64{0}, "a/b/c/0"},
		{V2KeyEncoding, "", []int64{1, 23, 45}, "1.23.45"},
		{ChunkKeyEncoding{"v2", '/'}, "x", []int64{1, 23, 45}, "x/1/23/45"},
		{V2KeyEncoding, "x", nil, "x/0"},
	}
	for _, tc := range tests {
		if got := tc.enc.Key(tc.prefix, tc.coords); got != tc.want {
			t.Errorf("%+v %q %v: %q, want %q", tc.enc, tc.prefix, tc.coords, got, tc.want)
		}
	}
	if g := GridShape([]int64{10, 7, 0}, []int64{3, 7, 2}); !reflect.DeepEqual(g, []int64{4, 1, 0}) {
		t.Errorf("grid %v", g)
	}
	a := &Array{Shape: []int64{}, ChunkShape: []int64{}}
	if a.NumChunks() != 1 {
		t.Error("0-d arrays have one chunk")
	}
}
