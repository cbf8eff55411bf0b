package codec

import (
	"bytes"
	"reflect"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// checkShape walks one frame without building values and refuses any array
// or map header that declares more elements than bytes remain. msgpack caps
// what it preallocates for typed slices and maps, but not for a []any it
// builds when decoding into an interface: a 5-byte header declaring 2^32
// elements would make it allocate 64 GiB. The walk is linear in the frame.
func checkShape(b []byte) error {
	r := bytes.NewReader(b)
	d := msgpack.NewDecoder(r)
	for pending := 1; pending > 0; pending-- {
		c, err := d.PeekCode()
		if err != nil {
			return err
		}
		var n int
		switch {
		case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
			n, err = d.DecodeArrayLen()
		case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
			n, err = d.DecodeMapLen()
			n *= 2
		default:
			err = d.Skip()
		}
		if err != nil {
			return err
		}
		if n > r.Len() {
			return corrupt("a length is larger than the frame", nil)
		}
		pending += max(n, 0)
	}
	return nil
}

var interfaceTypes sync.Map // reflect.Type → bool

// holdsInterface reports whether decoding into t may build values of
// interface type, which is when checkShape is needed.
func holdsInterface(t reflect.Type) bool {
	if v, ok := interfaceTypes.Load(t); ok {
		return v.(bool)
	}
	v := walkInterface(t, map[reflect.Type]bool{})
	interfaceTypes.Store(t, v)
	return v
}

func walkInterface(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return walkInterface(t.Elem(), seen)
	case reflect.Map:
		return walkInterface(t.Key(), seen) || walkInterface(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if walkInterface(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}
