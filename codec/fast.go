package codec

import "github.com/vmihailenco/msgpack/v5"

// Fast paths for slices of common element types (integers have their own, in
// ints.go): the same MessagePack a reflective Encode or Decode would produce
// or accept, without reflection or boxing per element. Each reports false if
// it does not handle the type.

// encodeFast encodes xs, if their type has a fast path and every element is
// within maxElem bytes (no cap if maxElem <= 0): numbers and bools take at
// most 9, a string 5 more than its length. Otherwise it reports false and
// writes nothing, and the caller takes the general path, which names the
// element too large.
func encodeFast(enc *msgpack.Encoder, xs any, maxElem int) (bool, error) {
	if maxElem > 0 && maxElem < 9 {
		return false, nil
	}
	if v, ok := xs.([]string); ok && maxElem > 0 {
		for _, x := range v {
			if len(x)+5 > maxElem {
				return false, nil
			}
		}
	}
	var err error
	switch v := xs.(type) {
	case []float64:
		for _, x := range v {
			if err = enc.EncodeFloat64(x); err != nil {
				break
			}
		}
	case []string:
		for _, x := range v {
			if err = enc.EncodeString(x); err != nil {
				break
			}
		}
	case []bool:
		for _, x := range v {
			if err = enc.EncodeBool(x); err != nil {
				break
			}
		}
	default:
		return false, nil
	}
	return true, err
}

// decodeFast decodes into dst, reporting the index of an element that does
// not decode.
func decodeFast(dec *msgpack.Decoder, dst any) (bool, int, error) {
	switch v := dst.(type) {
	case []float64:
		for i := range v {
			x, err := dec.DecodeFloat64()
			if err != nil {
				return true, i, err
			}
			v[i] = x
		}
	case []string:
		for i := range v {
			x, err := dec.DecodeString()
			if err != nil {
				return true, i, err
			}
			v[i] = x
		}
	case []bool:
		for i := range v {
			x, err := dec.DecodeBool()
			if err != nil {
				return true, i, err
			}
			v[i] = x
		}
	default:
		return false, 0, nil
	}
	return true, 0, nil
}

// fixedFast reports whether dst's fast path reads fixed-size values only
// (floats, bools), which need no walk first: a code each, checked, and
// nothing allocated.
func fixedFast(dst any) bool {
	switch dst.(type) {
	case []float64, []bool:
		return true
	}
	return false
}
