package zarr

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
)

// member is one name/value pair of a JSON object, value kept verbatim.
type member struct {
	Key   string
	Value json.RawMessage
}

// parseObject splits a JSON object into its members, in document order,
// keeping each value's bytes as written. what names the object in errors.
func parseObject(data []byte, what string) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, newError(ErrInvalid, "%s: not valid JSON: %v", what, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, newError(ErrInvalid, "%s: must be a JSON object", what)
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, newError(ErrInvalid, "%s: not valid JSON: %v", what, err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, newError(ErrInvalid, "%s: not valid JSON", what)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, newError(ErrInvalid, "%s: member %q: not valid JSON: %v", what, key, err)
		}
		out = append(out, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, newError(ErrInvalid, "%s: not valid JSON: %v", what, err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, newError(ErrInvalid, "%s: trailing data after the JSON object", what)
	}
	return out, nil
}

// objWriter builds a JSON object with members in insertion order.
type objWriter struct {
	buf    bytes.Buffer
	err    error
	indent string // "" means two spaces
}

func (w *objWriter) raw(key string, v json.RawMessage) {
	if w.buf.Len() == 0 {
		w.buf.WriteByte('{')
	} else {
		w.buf.WriteByte(',')
	}
	k, _ := marshal(key)
	w.buf.Write(k)
	w.buf.WriteByte(':')
	w.buf.Write(v)
}

func (w *objWriter) add(key string, v any) {
	b, err := marshal(v)
	if err != nil && w.err == nil {
		w.err = wrapError(ErrInvalid, err, "encoding %q", key)
	}
	w.raw(key, b)
}

// bytes returns the object, indented by two spaces as zarr-python writes.
func (w *objWriter) bytes() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	if w.buf.Len() == 0 {
		w.buf.WriteByte('{')
	}
	w.buf.WriteByte('}')
	var out bytes.Buffer
	indent := w.indent
	if indent == "" {
		indent = "  "
	}
	if err := json.Indent(&out, w.buf.Bytes(), "", indent); err != nil {
		return nil, wrapError(ErrInternal, err, "encoding metadata")
	}
	return out.Bytes(), nil
}

func isNull(v json.RawMessage) bool {
	return len(bytes.TrimSpace(v)) == 0 || string(bytes.TrimSpace(v)) == "null"
}

// isObject reports whether v is a JSON object.
func isObject(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && v[0] == '{'
}

// mustUnderstandFalse reports whether v is an object with
// "must_understand": false.
func mustUnderstandFalse(v json.RawMessage) bool {
	if !isObject(v) {
		return false
	}
	var o struct {
		MustUnderstand *bool `json:"must_understand"`
	}
	if json.Unmarshal(v, &o) != nil {
		return false
	}
	return o.MustUnderstand != nil && !*o.MustUnderstand
}

// parseShape reads a list of non-negative integers.
func parseShape(v json.RawMessage, field string, positive bool) ([]int64, error) {
	var nums []json.Number
	if err := unmarshalNumbers(v, &nums); err != nil {
		return nil, newError(ErrInvalid, "%s: must be a list of integers", field)
	}
	out := make([]int64, len(nums))
	for i, n := range nums {
		x, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || x < 0 || (positive && x == 0) {
			kind := "non-negative"
			if positive {
				kind = "positive"
			}
			return nil, newError(ErrInvalid, "%s[%d]: %s is not a %s integer", field, i, n, kind)
		}
		out[i] = x
	}
	return out, nil
}

func unmarshalNumbers(v json.RawMessage, out *[]json.Number) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	return dec.Decode(out)
}

// decodeNumber unmarshals v keeping numbers as json.Number.
func decodeNumber(v json.RawMessage, out any) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	return dec.Decode(out)
}

func mustJSON(v any) json.RawMessage {
	b, err := marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// marshal is json.Marshal without HTML escaping, so that typestrings keep
// their "<" and ">" as zarr-python writes them.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func sortStrings(s []string) { slices.Sort(s) }
