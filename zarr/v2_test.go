package zarr

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func roundTripV2(t *testing.T, a *Array) {
	t.Helper()
	za, zt, err := a.EncodeV2()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	b, err := ParseV2Array(za, zt)
	if err != nil {
		t.Fatalf("reparse: %v\n%s\n%s", err, za, zt)
	}
	if !reflect.DeepEqual(normNode(Node{Array: a}), normNode(Node{Array: b})) {
		t.Fatalf("round trip differs:\n%+v\n%+v\n%s\n%s", a, b, za, zt)
	}
}

func TestParseV2ZarrPython2(t *testing.T) {
	a, err := ParseV2Array(readTestdata(t, "v2_zarrpy2.zarray"), readTestdata(t, "v2_zarrpy2.zattrs"))
	if err != nil {
		t.Fatal(err)
	}
	if a.DataType != MustDataType("float64") || getUint(a.FillValue) != nan64 {
		t.Errorf("dtype %v fill %x", a.DataType, a.FillValue)
	}
	if a.ChunkKey("t", []int64{2, 3}) != "t/2.3" {
		t.Errorf("key %s", a.ChunkKey("t", []int64{2, 3}))
	}
	want := []CodecSpec{
		{Name: "bytes", Configuration: json.RawMessage(`{"endian":"little"}`)},
		{Name: "blosc", Configuration: json.RawMessage(`{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":8,"blocksize":0}`)},
	}
	if !reflect.DeepEqual(a.Codecs, want) {
		t.Errorf("codecs %s", mustJSON(a.Codecs))
	}
	if !reflect.DeepEqual(a.DimensionNames, []string{"y", "x"}) {
		t.Errorf("dims %v", a.DimensionNames)
	}
	if !jsonEqual(t, a.Attributes, []byte(`{"long_name": "temperature", "scale": 0.5}`)) {
		t.Errorf("attrs %s", a.Attributes)
	}
	za, zt, err := a.EncodeV2()
	if err != nil {
		t.Fatal(err)
	}
	// zarr-python 2 adds dimension_separator; otherwise the same document.
	var m map[string]any
	_ = json.Unmarshal(za, &m)
	delete(m, "dimension_separator")
	if !jsonEqual(t, mustJSON(m), readTestdata(t, "v2_zarrpy2.zarray")) {
		t.Errorf(".zarray differs:\n%s", za)
	}
	if !jsonEqual(t, zt, readTestdata(t, "v2_zarrpy2.zattrs")) {
		t.Errorf(".zattrs differs:\n%s", zt)
	}
	roundTripV2(t, a)
	// And the same array as v3.
	roundTripV3(t, Node{Array: a})
}

func TestParseV2Variants(t *testing.T) {
	a, err := ParseV2Array(readTestdata(t, "v2_fortran_bigendian.zarray"), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, c := range a.Codecs {
		names = append(names, c.Name)
	}
	if !reflect.DeepEqual(names, []string{"transpose", "numcodecs.delta", "bytes", "numcodecs.zlib"}) {
		t.Errorf("chain %v", names)
	}
	if string(a.Codecs[0].Configuration) != `{"order":[1,0]}` || string(a.Codecs[2].Configuration) != `{"endian":"big"}` {
		t.Errorf("transpose/bytes %s %s", a.Codecs[0].Configuration, a.Codecs[2].Configuration)
	}
	if string(a.Codecs[3].Configuration) != `{"level":1}` || string(a.Codecs[1].Configuration) != `{"dtype":">i8"}` {
		t.Errorf("numcodecs config %s %s", a.Codecs[1].Configuration, a.Codecs[3].Configuration)
	}
	if int64(getUint(a.FillValue)) != -1 || a.ChunkKey("", []int64{1, 2}) != "1/2" {
		t.Errorf("fill %x", a.FillValue)
	}
	roundTripV2(t, a)
	za, _, _ := a.EncodeV2()
	if !jsonEqual(t, za, readTestdata(t, "v2_fortran_bigendian.zarray")) {
		t.Errorf("encode differs:\n%s", za)
	}

	a, err = ParseV2Array(readTestdata(t, "v2_vlen_utf8.zarray"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.DataType.Kind != KindString || a.Codecs[0].Name != "vlen-utf8" || a.Codecs[1].Name != "zstd" || string(a.Codecs[1].Configuration) != `{"level":3,"checksum":false}` {
		t.Errorf("vlen: %v %s", a.DataType, mustJSON(a.Codecs))
	}
	roundTripV2(t, a)

	a, err = ParseV2Array(readTestdata(t, "v2_bytes_S8.zarray"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.DataType.Kind != KindFixedBytes || string(a.FillValue) != "abc\x00\x00\x00\x00\x00" {
		t.Errorf("S8: %v %q", a.DataType, a.FillValue)
	}
	roundTripV2(t, a)
	roundTripV3(t, Node{Array: a})
}

func TestV2DataTypes(t *testing.T) {
	tests := []struct {
		in   string
		name string
		big  bool
	}{
		{"<f4", "float32", false}, {">i8", "int64", true}, {"|b1", "bool", false}, {"|u1", "uint8", false},
		{"<c16", "complex128", false}, {">c8", "complex64", true}, {"|S8", "S8", false}, {"<U4", "U4", false},
		{">U4", "U4", true}, {"|V16", "r128", false}, {"<f2", "float16", false}, {"|i1", "int8", false},
	}
	for _, tc := range tests {
		d, big, err := ParseV2DataType(tc.in)
		if err != nil || d.Name != tc.name || big != tc.big {
			t.Errorf("%s: %v %v %v", tc.in, d, big, err)
			continue
		}
		back, err := V2TypeString(d, big)
		if err != nil || back != tc.in {
			t.Errorf("%s: back %q %v", tc.in, back, err)
		}
	}
	for _, bad := range []string{"", "f4", "<f3", "<M8[ns]", "|O", "<q8"} {
		if _, _, err := ParseV2DataType(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestV2BloscShuffle(t *testing.T) {
	for _, tc := range []struct {
		dtype   string
		shuffle int
		want    string
	}{{"<f8", -1, "shuffle"}, {"|u1", -1, "bitshuffle"}, {"<f8", 0, "noshuffle"}, {"<f8", 2, "bitshuffle"}} {
		doc := `{"zarr_format":2,"shape":[4],"chunks":[4],"dtype":"` + tc.dtype + `","fill_value":0,"order":"C","filters":null,
		  "compressor":{"id":"blosc","cname":"zstd","clevel":3,"shuffle":` + string(mustJSON(tc.shuffle)) + `,"blocksize":0}}`
		a, err := ParseV2Array([]byte(doc), nil)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct{ Shuffle string }
		_ = json.Unmarshal(a.Codecs[len(a.Codecs)-1].Configuration, &cfg)
		if cfg.Shuffle != tc.want {
			t.Errorf("%s %d: %s", tc.dtype, tc.shuffle, cfg.Shuffle)
		}
	}
}

func TestV2Consolidated(t *testing.T) {
	nodes, err := ParseV2Consolidated(readTestdata(t, "v2_consolidated.zmetadata"))
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 || nodes[""].Group == nil || nodes["air"].Array == nil || nodes["sub"].Group == nil {
		t.Fatalf("nodes %+v", nodes)
	}
	if !reflect.DeepEqual(nodes["air"].Array.DimensionNames, []string{"time"}) {
		t.Errorf("dims %v", nodes["air"].Array.DimensionNames)
	}
	doc, err := EncodeV2Consolidated(nodes)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseV2Consolidated(doc)
	if err != nil {
		t.Fatal(err)
	}
	for k := range nodes {
		if !reflect.DeepEqual(normNode(nodes[k]), normNode(again[k])) {
			t.Errorf("%q differs after round trip", k)
		}
	}
}

func TestNCZarr490(t *testing.T) {
	g, err := ParseV2Group(readTestdata(t, "nc490_root.zgroup"), readTestdata(t, "nc490_root.zattrs"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Dimensions, []Dimension{{"time", 4, false}, {"lat", 3, false}}) {
		t.Errorf("dims %+v", g.Dimensions)
	}
	if g.NCZarr == nil || !g.NCZarr.Superblock || g.NCZarr.Version != "2.0.0" || !reflect.DeepEqual(g.NCZarr.Arrays, []string{"temp", "scalar_v"}) {
		t.Errorf("nczarr %+v", g.NCZarr)
	}
	if string(g.Attributes) != `{"title":"test"}` || g.NCZarr.AttributeTypes["title"] != ">S1" {
		t.Errorf("attrs %s %v", g.Attributes, g.NCZarr.AttributeTypes)
	}
	a, err := ParseV2Array(readTestdata(t, "nc490_temp.zarray"), readTestdata(t, "nc490_temp.zattrs"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.DimensionNames, []string{"time", "lat"}) || !reflect.DeepEqual(a.NCZarr.DimensionRefs, []string{"/time", "/lat"}) {
		t.Errorf("dims %v %+v", a.DimensionNames, a.NCZarr)
	}
	if a.NCZarr.AttributeTypes["valid_range"] != "<i4" || len(a.Extensions) != 0 {
		t.Errorf("types %v ext %v", a.NCZarr.AttributeTypes, a.Extensions)
	}
	if f := math.Float32frombits(uint32(getUint(a.FillValue))); f != 9.969209968386869e+36 {
		t.Errorf("fill %v", f)
	}
	roundTripV2(t, a)
	s, err := ParseV2Array(readTestdata(t, "nc490_scalar.zarray"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Shape) != 0 || len(s.ChunkShape) != 0 || s.NCZarr.Storage != "scalar" || s.ChunkKey("v", nil) != "v/0" {
		t.Errorf("scalar %+v", s)
	}
	za, _, err := s.EncodeV2()
	if err != nil || !strings.Contains(string(za), `"shape": [`) {
		t.Fatal(err)
	}
	var m struct{ Shape []int64 }
	_ = json.Unmarshal(za, &m)
	if !reflect.DeepEqual(m.Shape, []int64{1}) {
		t.Errorf("scalar written as %v", m.Shape)
	}
	roundTripV2(t, s)
	// Group round trip, in the form it was read in (4.9.0's).
	zg, zt, err := g.EncodeV2()
	if err != nil {
		t.Fatal(err)
	}
	g2, err := ParseV2Group(zg, zt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, g2) {
		t.Errorf("group round trip:\n%+v\n%+v\n%s", g.NCZarr, g2.NCZarr, zt)
	}
}

func TestNCZarrNew(t *testing.T) {
	g, err := ParseV2Group([]byte(`{"zarr_format": 2}`), readTestdata(t, "ncnew_root.zattrs"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Dimensions, []Dimension{{"time", 0, true}, {"lat", 3, false}}) || g.NCZarr.Version != "3.0.0" {
		t.Errorf("dims %+v %+v", g.Dimensions, g.NCZarr)
	}
	if !reflect.DeepEqual(g.NCZarr.AttributeTypes, map[string]string{"title": ">S1"}) {
		t.Errorf("types %v", g.NCZarr.AttributeTypes)
	}
	zarray := `{"zarr_format": 2, "shape": [0, 3], "dtype": "<f4", "chunks": [1, 3], "fill_value": null, "order": "C", "compressor": null, "filters": null}`
	a, err := ParseV2Array([]byte(zarray), readTestdata(t, "ncnew_temp.zattrs"))
	if err != nil {
		t.Fatal(err)
	}
	if !a.FillNull || !reflect.DeepEqual(a.DimensionNames, []string{"time", "lat"}) || string(a.Attributes) != `{"units":"K"}` {
		t.Errorf("array %+v", a)
	}
	roundTripV2(t, a)
}

func TestParseV2Errors(t *testing.T) {
	base := `{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<i2","fill_value":0,"order":"C","filters":null,"compressor":null}`
	set := func(k string, v string) []byte {
		var m map[string]json.RawMessage
		_ = json.Unmarshal([]byte(base), &m)
		if v == "" {
			delete(m, k)
		} else {
			m[k] = json.RawMessage(v)
		}
		return mustJSON(m)
	}
	tests := []struct {
		name, key, val string
		kind           *ErrorKind
		want           string
	}{
		{"format", "zarr_format", "3", ErrInvalid, "zarr_format"},
		{"dtype", "dtype", `"<x4"`, ErrUnsupported, "dtype"},
		{"structured", "dtype", `[["a","<i4"]]`, ErrUnsupported, "dtype"},
		{"object", "dtype", `"|O"`, ErrInvalid, "dtype"},
		{"order", "order", `"K"`, ErrInvalid, "order"},
		{"compressor", "compressor", `{"id":"snappyx"}`, ErrUnsupported, "snappyx"},
		{"compressor id", "compressor", `{"level":1}`, ErrInvalid, "compressor.id"},
		{"filters", "filters", `{"id":"delta"}`, ErrInvalid, "filters"},
		{"fill", "fill_value", `"abc"`, ErrInvalid, "fill_value"},
		{"chunks", "chunks", `[0]`, ErrInvalid, "chunks"},
		{"no shape", "shape", "", ErrInvalid, "shape"},
		{"separator", "dimension_separator", `"-"`, ErrInvalid, "dimension_separator"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseV2Array(set(tc.key, tc.val), nil)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: want %v naming %q", err, tc.kind, tc.want)
			}
		})
	}
	if _, err := ParseV2Array([]byte(base), []byte(`{"_ARRAY_DIMENSIONS": ["a", "b"]}`)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "_ARRAY_DIMENSIONS") {
		t.Errorf("_ARRAY_DIMENSIONS: %v", err)
	}
}
