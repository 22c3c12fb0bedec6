package quotaserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// decodeStrict decodes body, exactly one JSON value, into v (a pointer to
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
//   - nothing follows the value.
//
// Any endpoint that reads a JSON body uses it, so every body is held to
// the same rules. The error says what is wrong and where, in JSON terms.
func decodeStrict(body []byte, v any, required ...string) error {
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8")
	}
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return fmt.Errorf("decodeStrict needs a pointer, got %T", v)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := strictWalker{dec: dec, required: required}
	if err := w.value(t.Elem(), ""); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	return nil
}

type strictWalker struct {
	dec      *json.Decoder
	required []string
}

// value checks the next JSON value against Go type t; path is its place
// ("" for the top, "topics[]" for an array's elements, "topics[].topic").
// A value of the wrong kind is skipped: the final json.Decode reports it
// with its type.
func (w *strictWalker) value(t reflect.Type, path string) error {
	tok, err := w.dec.Token()
	if err != nil {
		return syntaxError(err)
	}
	for t.Kind() == reflect.Pointer {
		if tok == nil {
			return nil
		}
		t = t.Elem()
	}
	switch tok {
	case nil:
		if t.Kind() == reflect.Interface {
			return nil
		}
		return fmt.Errorf("%s: must not be null", where(path))
	case json.Delim('{'):
		if t.Kind() != reflect.Struct {
			return w.skip(1)
		}
		return w.object(t, path)
	case json.Delim('['):
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return w.skip(1)
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.value(t.Elem(), path+"[]"); err != nil {
				return err
			}
		}
		_, err := w.dec.Token() // ]
		return syntaxError(err)
	}
	return nil
}

// object checks the keys of an object whose '{' was read.
func (w *strictWalker) object(t reflect.Type, path string) error {
	fields := jsonFields(t)
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return syntaxError(err)
		}
		key, _ := tok.(string)
		at := join(path, key)
		if seen[key] {
			return fmt.Errorf("%s: key given twice", where(at))
		}
		seen[key] = true
		ft, ok := fields[key]
		if !ok {
			if alt := caseless(fields, key); alt != "" {
				return fmt.Errorf("%s: unknown field (keys are case-sensitive: %q)", where(at), alt)
			}
			return fmt.Errorf("%s: unknown field", where(at))
		}
		if err := w.value(ft, at); err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != nil { // }
		return syntaxError(err)
	}
	for _, r := range w.required {
		parent, key := "", r
		if i := strings.LastIndex(r, "."); i >= 0 {
			parent, key = r[:i], r[i+1:]
		}
		if parent == path && !seen[key] {
			return fmt.Errorf("%s: required", where(r))
		}
	}
	return nil
}

// skip consumes the rest of a value whose opening delimiter was read.
func (w *strictWalker) skip(depth int) error {
	for depth > 0 {
		tok, err := w.dec.Token()
		if err != nil {
			return syntaxError(err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
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
