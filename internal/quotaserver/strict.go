package quotaserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DecodeStrict decodes body, exactly one JSON value, into v (a pointer to
// a struct with json tags), keeping the promises of the protocol's spec
// that encoding/json alone does not:
//
//   - the body is valid UTF-8 (encoding/json would replace bad bytes with
//     U+FFFD, turning two different names into one);
//   - object keys match a field's JSON name exactly (encoding/json matches
//     them case-insensitively, so {"Producer": ...} would pass) and appear
//     once (encoding/json keeps the last of duplicates);
//   - no field is null unless its Go type is a pointer ("demand": null
//     would silently mean 0);
//   - every path in required is present. A path names a key of the top
//     object ("producer") or of each element of an array field
//     ("topics[].topic");
//   - nothing follows the value;
//   - a number with a zero fraction or an exponent is an integer where an
//     integer is wanted (JSON Schema says 5.0 and 5e0 are integers;
//     encoding/json refuses them for an int field).
//
// Any endpoint that reads a JSON body uses it, so every body is held to
// the same rules. The error says what is wrong and where, in JSON terms.
// Exported for the clients' tests: an older daemon is this decoder over
// an older body type.
func DecodeStrict(body []byte, v any, required ...string) error {
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8")
	}
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return fmt.Errorf("DecodeStrict needs a pointer, got %T", v)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := strictWalker{dec: dec, required: required}
	val, err := w.value(t.Elem(), "")
	if err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	// The checked value, with its integers normalized, decoded for real.
	norm, err := json.Marshal(val)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(norm))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

type strictWalker struct {
	dec      *json.Decoder
	required []string
}

// value checks the next JSON value against Go type t and returns it
// (objects as maps, numbers as json.Number); path is its place ("" for
// the top, "topics[]" for an array's elements, "topics[].topic"). A value
// of the wrong kind is returned as is: the final decoding reports it with
// its type.
func (w *strictWalker) value(t reflect.Type, path string) (any, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	for t.Kind() == reflect.Pointer {
		if tok == nil {
			return nil, nil
		}
		t = t.Elem()
	}
	switch tok {
	case nil:
		if t.Kind() == reflect.Interface {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: must not be null", where(path))
	case json.Delim('{'):
		if t.Kind() != reflect.Struct {
			return w.rest('{')
		}
		return w.object(t, path)
	case json.Delim('['):
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return w.rest('[')
		}
		list := []any{}
		for w.dec.More() {
			v, err := w.value(t.Elem(), path+"[]")
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := w.dec.Token() // ]
		return list, syntaxError(err)
	}
	if n, ok := tok.(json.Number); ok && isInt(t.Kind()) {
		return integral(n), nil
	}
	return tok, nil
}

// object checks the keys of an object whose '{' was read.
func (w *strictWalker) object(t reflect.Type, path string) (any, error) {
	fields := jsonFields(t)
	out := map[string]any{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		key, _ := tok.(string)
		at := join(path, key)
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s: key given twice", where(at))
		}
		ft, ok := fields[key]
		if !ok {
			if alt := caseless(fields, key); alt != "" {
				return nil, fmt.Errorf("%s: unknown field (keys are case-sensitive: %q)", where(at), alt)
			}
			return nil, fmt.Errorf("%s: unknown field", where(at))
		}
		if out[key], err = w.value(ft, at); err != nil {
			return nil, err
		}
	}
	if _, err := w.dec.Token(); err != nil { // }
		return nil, syntaxError(err)
	}
	for _, r := range w.required {
		parent, key := "", r
		if i := strings.LastIndex(r, "."); i >= 0 {
			parent, key = r[:i], r[i+1:]
		}
		if _, ok := out[key]; parent == path && !ok {
			return nil, fmt.Errorf("%s: required", where(r))
		}
	}
	return out, nil
}

// rest consumes the rest of a value whose opening delimiter open was read
// where another kind is wanted, and returns an empty value of its kind: the
// final decoding then names the field and its type.
func (w *strictWalker) rest(open json.Delim) (any, error) {
	for depth := 1; depth > 0; {
		tok, err := w.dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	if open == '{' {
		return map[string]any{}, nil
	}
	return []any{}, nil
}

// isInt reports whether k is an integer kind.
func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// integral writes n without fraction or exponent when its value is a
// whole number that fits 64 bits (5.0, 5e0, 1.5e3), exactly; otherwise n
// as is, for the final decoding to refuse.
func integral(n json.Number) json.Number {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		return n
	}
	f, _, err := big.ParseFloat(s, 10, 128, big.ToNearestEven)
	if err != nil || !f.IsInt() {
		return n
	}
	if i, acc := f.Int64(); acc == big.Exact {
		return json.Number(strconv.FormatInt(i, 10))
	}
	if u, acc := f.Uint64(); acc == big.Exact {
		return json.Number(strconv.FormatUint(u, 10))
	}
	return n
}

// jsonFields maps the JSON names of t's exported fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func caseless(fields map[string]reflect.Type, key string) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return n
		}
	}
	return ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func where(path string) string {
	if path == "" {
		return "the body"
	}
	return path
}

func syntaxError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		return errors.New("unexpected end of JSON input")
	}
	return err
}
