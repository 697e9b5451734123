package zarr

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestNCZarrAttrType(t *testing.T) {
	for _, c := range []struct {
		v            string
		want, legacy string
	}{
		{`"text"`, ">S1", "<U1"},
		{`7`, "<i4", "<i4"},
		{`-2147483648`, "<i4", "<i4"},
		{`2147483648`, "<i8", "<i8"},
		{`[1, -5000000000]`, "<i8", "<i8"},
		{`18446744073709551615`, "<u8", "<u8"},
		{`[18446744073709551615, -1]`, "<f8", "<f8"},
		{`2.5`, "<f8", "<f8"},
		{`2.0`, "<f8", "<f8"},
		{`1e3`, "<f8", "<f8"},
		{`[1, 2.5]`, "<f8", "<f8"},
		{`true`, "|J0", ""},
		{`null`, "|J0", ""},
		{`[]`, "|J0", ""},
		{`["a", "b"]`, "|J0", ""},
		{`{"a": 1}`, "|J0", ""},
	} {
		if got := attrType(json.RawMessage(c.v), false); got != c.want {
			t.Errorf("attrType(%s) = %q, want %q", c.v, got, c.want)
		}
		if got := attrType(json.RawMessage(c.v), true); got != c.legacy {
			t.Errorf("attrType(%s, legacy) = %q, want %q", c.v, got, c.legacy)
		}
	}
}

// Recorded types survive while they fit the value (a float attribute
// netCDF wrote as <f4 stays <f4 even when its value is integral), and are
// replaced when the value changed kind.
func TestNCZarrRecordedAttrTypes(t *testing.T) {
	recorded := map[string]string{"f": "<f4", "i": "<i2", "s": ">S1", "j": "|J0", "gone": "<i4", "was_num": "<f4", "was_str": ">S1"}
	attrs := json.RawMessage(`{"f": 3, "i": -4, "s": "x", "j": {"k": 1}, "was_num": "now text", "was_str": 2.5, "new": 9}`)
	got, err := userAttrTypes(attrs, recorded, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"f": "<f4", "i": "<i2", "s": ">S1", "j": "|J0", "was_num": ">S1", "was_str": "<f8", "new": "<i4"}
	if len(got) != len(want) {
		t.Errorf("types %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	// netCDF 4.9.0 has no JSON type: such attributes stay untyped.
	got, _ = userAttrTypes(attrs, recorded, true)
	if _, ok := got["j"]; ok || got["was_num"] != "<U1" {
		t.Errorf("legacy types %v", got)
	}
}

// A dataset netCDF 4.9.0 wrote keeps its form when the gateway rewrites it
// (4.9.0 could not read it otherwise), and a new one in the current form
// carries the attribute types netCDF 4.10 writes.
func TestNCZarrFormsKept(t *testing.T) {
	g, err := ParseV2Group(readTestdata(t, "nc490_root.zgroup"), readTestdata(t, "nc490_root.zattrs"))
	if err != nil {
		t.Fatal(err)
	}
	if !g.NCZarr.Legacy {
		t.Fatal("a 4.9.0 group is not recognised as such")
	}
	zg, zt, err := g.EncodeV2()
	if err != nil {
		t.Fatal(err)
	}
	flat := func(b []byte) string { return strings.Join(strings.Fields(string(b)), "") }
	if !strings.Contains(flat(zg), `"_NCZARR_SUPERBLOCK":{"version":"2.0.0"},"_NCZARR_GROUP":{"dims":{"time":4,"lat":3},"vars":["temp","scalar_v"],"groups":[]}`) ||
		flat(zt) != `{"title":"test","_NCZARR_ATTR":{"types":{"title":">S1"}}}` {
		t.Errorf("4.9.0 group rewritten as\n%s\n%s", zg, zt)
	}
	a, err := ParseV2Array(readTestdata(t, "nc490_temp.zarray"), readTestdata(t, "nc490_temp.zattrs"))
	if err != nil {
		t.Fatal(err)
	}
	za, zt, err := a.EncodeV2()
	if err != nil {
		t.Fatal(err)
	}
	if !a.NCZarr.Legacy || !strings.Contains(flat(za), `"_NCZARR_ARRAY":{"dimrefs":["/time","/lat"],"storage":"chunked"}`) ||
		strings.Contains(flat(zt), "_nczarr") || !strings.Contains(flat(zt), `"_NCZARR_ATTR":{"types":{`) {
		t.Errorf("4.9.0 array rewritten as\n%s\n%s", za, zt)
	}

	g.NCZarr.Legacy = false
	g.Attributes = json.RawMessage(`{"title":"test","n":7}`)
	zg, zt, err = g.EncodeV2()
	if err != nil {
		t.Fatal(err)
	}
	if flat(zg) != `{"zarr_format":2}` || !strings.Contains(flat(zt), `"_nczarr_attr":{"types":{"_nczarr_attr":"|J0","_nczarr_group":"|J0","_nczarr_superblock":"|J0","n":"<i4","title":">S1"}}`) {
		t.Errorf("current form:\n%s\n%s", zg, zt)
	}
	back, err := ParseV2Group(zg, zt)
	if err != nil || back.NCZarr.Legacy || back.NCZarr.AttributeTypes["n"] != "<i4" {
		t.Errorf("current form read back: %+v, %v", back.NCZarr, err)
	}
}

// netCDF-C 4.10 writes a scalar as shape [1] with no dimension references
// and "scalar": 1 (storage "chunked"); it is a 0-d array, as netCDF reads it.
func TestNCZarrScalarCurrentForm(t *testing.T) {
	zarray := []byte(`{"zarr_format": 2, "shape": [1], "dtype": "<i4", "chunks": [1], "fill_value": -2147483647, "order": "C", "compressor": null, "filters": null}`)
	zattrs := []byte(`{"_ARRAY_DIMENSIONS": ["_scalar_"], "_nczarr_array": {"dimension_references": [], "scalar": 1, "storage": "chunked"}, "_nczarr_attr": {"types": {"_nczarr_array": "|J0", "_nczarr_attr": "|J0"}}}`)
	a, err := ParseV2Array(zarray, zattrs)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Shape) != 0 || len(a.ChunkShape) != 0 || a.DimensionNames != nil || a.NCZarr == nil || a.NCZarr.Storage != "scalar" {
		t.Errorf("shape %v chunks %v dims %v nczarr %+v, want a 0-d scalar", a.Shape, a.ChunkShape, a.DimensionNames, a.NCZarr)
	}
	// Without the flag, no references for one dimension is still an error.
	bad := []byte(strings.Replace(string(zattrs), `"scalar": 1, `, "", 1))
	if _, err := ParseV2Array(zarray, bad); err == nil {
		t.Error("no dimension references for a 1-d array accepted")
	}
}
