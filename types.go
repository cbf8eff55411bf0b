package redmap

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/zeebo/blake3"
)

// signature returns a handle's signature: its types as Go prints them, then
// a fingerprint of their structure, "func(tasks.Doc) tasks.Out #1f2e3d4c5b6a7988",
// and the structure itself, as one line per leaf (see describe). Two
// handles whose types print alike but are built differently (tasks.Doc of
// two versions of a package, with a field renamed, retyped or retagged)
// have different signatures. Computed once per handle.
func signature(printed string, types map[string]reflect.Type) (string, []string) {
	var desc []string
	for _, role := range slices.Sorted(func(yield func(string) bool) {
		for r := range types {
			if !yield(r) {
				return
			}
		}
	}) {
		desc = append(desc, describe(role, types[role], nil)...)
	}
	sum := blake3.Sum256([]byte(strings.Join(desc, "\n")))
	return printed + " #" + hex.EncodeToString(sum[:8]), desc
}

// describe returns the structure of t, as MessagePack sees it, as lines
// "path: type": one per leaf, struct fields by their encoded names (tags
// included), in a fixed order. Named types add nothing (a Celsius is a
// float64 on the wire), except structs without exported fields (time.Time),
// which are named.
func describe(path string, t reflect.Type, seen []reflect.Type) []string {
	if slices.Contains(seen, t) {
		return []string{fmt.Sprintf("%s: (recursive %v)", path, t)}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describe(path, t.Elem(), seen)
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return []string{path + ": bytes"}
		}
		return describe(path+"[]", t.Elem(), append(seen, t))
	case reflect.Map:
		return describe(fmt.Sprintf("%s{%s}", path, t.Key().Kind()), t.Elem(), append(seen, t))
	case reflect.Interface:
		return []string{path + ": any"}
	case reflect.Struct:
		var out []string
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("msgpack")
			if tag == "-" {
				continue
			}
			name := f.Name
			if n, _, _ := strings.Cut(tag, ","); n != "" {
				name = n
			}
			field := path + "." + name
			if tag != "" {
				field += " `" + tag + "`"
			}
			out = append(out, describe(field, f.Type, append(seen, t))...)
		}
		if out == nil {
			return []string{fmt.Sprintf("%s: %v", path, t)}
		}
		return out
	}
	return []string{path + ": " + t.Kind().String()}
}
