// Package strictjson decodes JSON that people write by hand (settings, request bodies) without
// the leniencies of encoding/json that let a mistake pass silently: encoding/json keeps the last
// of a repeated key and matches a key to a struct field whatever its case.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// MaxDepth bounds how deeply objects and arrays may nest (as encoding/json bounds it).
const MaxDepth = 10000

// Decode decodes data, exactly one JSON value, into v as encoding/json does with
// DisallowUnknownFields, and refuses besides, at any depth: a key repeated within one object,
// and a key that names a field of the struct it decodes into only when case is ignored. Those
// two are reported as a *KeyError, before anything is decoded into v; more than one value is
// ErrTrailingData.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := walk(dec, reflect.TypeOf(v), nil, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrTrailingData
	}
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// ErrTrailingData is Decode's error when data holds more than one JSON value.
var ErrTrailingData = errors.New("unexpected data after the JSON value")

// KeyError is a key Decode refuses.
type KeyError struct {
	// Path names the object that holds Key: the keys from the top down, an array element as
	// its index in brackets ("[2]"); empty for the top object.
	Path []string
	Key  string
	// Field is the field name Key spells in another case; "" when Key is repeated.
	Field string
}

func (e *KeyError) Error() string {
	where := ""
	if len(e.Path) > 0 {
		where = " in " + strconv.QuoteToASCII(PathString(e.Path))
	}
	if e.Field == "" {
		return fmt.Sprintf("duplicate key %+q%s", e.Key, where)
	}
	return fmt.Sprintf("key %+q%s must be written %q (keys are case-sensitive)", e.Key, where, e.Field)
}

// PathString joins a KeyError's path: keys with dots, indexes as they are ("a.b[2].c").
func PathString(path []string) string {
	var b strings.Builder
	for i, p := range path {
		if i > 0 && !strings.HasPrefix(p, "[") {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// target is the type the value at hand decodes into, or nil when nothing is known of it (an
// interface, a type that decodes itself, a key the struct lacks).
func target(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
			t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
			return nil
		}
		if t.Kind() != reflect.Pointer {
			return t
		}
		t = t.Elem()
	}
	return nil
}

// walk reads one value from dec, checking the keys of every object in it against t.
func walk(dec *json.Decoder, t reflect.Type, path []string, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth++; depth > MaxDepth {
		return fmt.Errorf("JSON nested deeper than %d", MaxDepth)
	}
	t = target(t)
	if d == '[' {
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walk(dec, elem, with(path, "["+strconv.Itoa(i)+"]"), depth); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	}
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string) // the decoder allows only a string here
		if seen[key] {
			return &KeyError{Path: path, Key: key}
		}
		seen[key] = true
		vt := elem
		if fields != nil {
			var ok bool
			if vt, ok = fields[key]; !ok {
				for name := range fields {
					if strings.EqualFold(name, key) { // encoding/json's own matching
						return &KeyError{Path: path, Key: key, Field: name}
					}
				}
			}
		}
		if err := walk(dec, vt, with(path, key), depth); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

// with returns path and p in a new slice (a KeyError keeps its path).
func with(path []string, p string) []string {
	return append(path[:len(path):len(path)], p)
}

// fieldsOf maps the JSON names of struct t's fields, those of embedded structs included, to
// their types, as encoding/json names them (the json tag's name, else the Go name; the
// shallowest field of a name wins).
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	type field struct {
		t     reflect.Type
		depth int
	}
	found := map[string]field{}
	var add func(t reflect.Type, depth int)
	add = func(t reflect.Type, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					if depth < 10 {
						add(ft, depth+1)
					}
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if old, ok := found[name]; !ok || depth < old.depth {
				found[name] = field{f.Type, depth}
			}
		}
	}
	add(t, 0)
	out := make(map[string]reflect.Type, len(found))
	for name, f := range found {
		out[name] = f.t
	}
	return out
}
