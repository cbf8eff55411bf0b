package codec

import (
	"bytes"
	"reflect"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// canonical rewrites one MessagePack value so that the entries of every map in
// it, at any depth, are in the order of their encoded keys. Go iterates maps
// in random order, so without it two encodings of one lookup table differ,
// and so would their BLAKE3 hashes: the same constant would be stored and
// fetched again for each batch.
func canonical(b []byte) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(b))
	d := msgpack.NewDecoder(bytes.NewReader(b))
	if err := canonValue(d, &out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func canonValue(d *msgpack.Decoder, out *bytes.Buffer) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	enc := msgpack.NewEncoder(out)
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil {
			return err
		}
		type pair struct{ k, v []byte }
		pairs := make([]pair, 0, min(n, 1<<16))
		for range n {
			var k, v bytes.Buffer
			if err := canonValue(d, &k); err != nil {
				return err
			}
			if err := canonValue(d, &v); err != nil {
				return err
			}
			pairs = append(pairs, pair{k.Bytes(), v.Bytes()})
		}
		slices.SortFunc(pairs, func(a, b pair) int { return bytes.Compare(a.k, b.k) })
		if err := enc.EncodeMapLen(n); err != nil {
			return err
		}
		for _, p := range pairs {
			out.Write(p.k)
			out.Write(p.v)
		}
		return nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.DecodeArrayLen()
		if err != nil {
			return err
		}
		if err := enc.EncodeArrayLen(n); err != nil {
			return err
		}
		for range n {
			if err := canonValue(d, out); err != nil {
				return err
			}
		}
		return nil
	}
	raw, err := d.DecodeRaw()
	if err != nil {
		return err
	}
	out.Write(raw)
	return nil
}

// mayHoldMap reports whether a value of type t can contain a map, at any
// depth: only those need canonical.
func mayHoldMap(t reflect.Type) bool { return mayHoldMapSeen(t, map[reflect.Type]bool{}) }

func mayHoldMapSeen(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Map, reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return mayHoldMapSeen(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if mayHoldMapSeen(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}
