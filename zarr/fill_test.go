package zarr

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestFillValues(t *testing.T) {
	tests := []struct {
		dtype string
		in    string
		want  []byte
		out   string // canonical v3 encoding; "" means same as in
	}{
		{"bool", `true`, []byte{1}, ""},
		{"int8", `-1`, []byte{0xff}, ""},
		{"int64", `-9223372036854775808`, []byte{0, 0, 0, 0, 0, 0, 0, 0x80}, ""},
		{"uint64", `18446744073709551615`, []byte{255, 255, 255, 255, 255, 255, 255, 255}, ""},
		{"uint16", `4096`, []byte{0, 0x10}, ""},
		{"float32", `"NaN"`, []byte{0, 0, 0xc0, 0x7f}, ""},
		{"float32", `"0x7fc00000"`, []byte{0, 0, 0xc0, 0x7f}, `"NaN"`},
		{"float32", `"0x7fc00001"`, []byte{1, 0, 0xc0, 0x7f}, ""},
		{"float64", `"Infinity"`, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x7f}, ""},
		{"float64", `"-Infinity"`, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xff}, ""},
		{"float64", `1.5`, []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x3f}, ""},
		{"float64", `0`, make([]byte, 8), `0.0`},
		{"float64", `1e20`, []byte{0x40, 0x8c, 0xb5, 0x78, 0x1d, 0xaf, 0x15, 0x44}, `1e+20`},
		{"float16", `1.0`, []byte{0, 0x3c}, ""},
		{"float16", `"NaN"`, []byte{0, 0x7e}, ""},
		{"complex64", `[1.0, "NaN"]`, []byte{0, 0, 0x80, 0x3f, 0, 0, 0xc0, 0x7f}, ""},
		{"complex128", `["-Infinity", 0.0]`, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}, ""},
		{"r16", `[1,255]`, []byte{1, 255}, ""},
		{"string", `"héllo"`, []byte("héllo"), ""},
		{"bytes", `"AAE="`, []byte{0, 1}, ""},
		{"bytes", `[0, 1]`, []byte{0, 1}, `"AAE="`},
	}
	for _, tc := range tests {
		d := MustDataType(tc.dtype)
		got, null, err := ParseFillValue(d, json.RawMessage(tc.in))
		if err != nil || null || string(got) != string(tc.want) {
			t.Errorf("%s %s: %x %v %v", tc.dtype, tc.in, got, null, err)
			continue
		}
		out, err := EncodeFillValue(d, got, false)
		want := tc.out
		if want == "" {
			want = tc.in
		}
		if err != nil || string(out) != want {
			t.Errorf("%s %s: encoded %s %v, want %s", tc.dtype, tc.in, out, err, want)
		}
	}
	if _, null, err := ParseFillValue(MustDataType("int32"), json.RawMessage(`null`)); !null || err != nil {
		t.Error("null")
	}
	for _, bad := range []struct{ dtype, in string }{
		{"bool", `1`}, {"int8", `128`}, {"uint8", `-1`}, {"int32", `1.5`}, {"float32", `"nan"`},
		{"float32", `"0x7fc0000000"`}, {"complex64", `[1]`}, {"r16", `[1]`}, {"r8", `[256]`}, {"string", `1`},
	} {
		_, _, err := ParseFillValue(MustDataType(bad.dtype), json.RawMessage(bad.in))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s %s: %v", bad.dtype, bad.in, err)
		}
	}
	// v2 forms.
	u4 := DataType{Name: "U4", Kind: KindFixedUnicode, Size: 16}
	got, _, err := ParseFillValueV2(u4, json.RawMessage(`"ab"`))
	if err != nil || string(got) != "a\x00\x00\x00b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("U4: %q %v", got, err)
	}
	if out, _ := EncodeFillValueV2(u4, got, false); string(out) != `"ab"` {
		t.Errorf("U4 encode %s", out)
	}
	v8 := DataType{Name: "r64", Kind: KindRaw, Size: 8}
	got, _, err = ParseFillValueV2(v8, json.RawMessage(`"AAAAAAAAAAE="`))
	if err != nil || got[7] != 1 {
		t.Errorf("V8: %x %v", got, err)
	}
}
