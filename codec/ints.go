package codec

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The fixed-width fast path: integers are most of what tiny elements are, and
// going through msgpack.Encoder and Decoder costs a call through an interface
// per byte. appendInt and parseInts write and read the very bytes
// Encoder.EncodeInt and Decoder.DecodeInt64 do (the smallest form that holds
// the value; fixnums, nil as 0 and every width signed or unsigned on the way
// in), straight on a byte slice. TestIntsMatchMsgpack holds them to that.

// appendInt appends n's MessagePack form to b.
func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0 && n <= math.MaxInt8:
		return append(b, byte(n))
	case n >= 0 && n <= math.MaxUint8:
		return append(b, msgpcode.Uint8, byte(n))
	case n >= 0 && n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Uint16), uint16(n))
	case n >= 0 && n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Uint32), uint32(n))
	case n >= 0:
		return binary.BigEndian.AppendUint64(append(b, msgpcode.Uint64), uint64(n))
	case n >= int64(int8(msgpcode.NegFixedNumLow)):
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, msgpcode.Int8, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Int16), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Int32), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, msgpcode.Int64), uint64(n))
	}
}

// appendInts appends a MessagePack array of xs to b.
func appendInts[T int | int64](b []byte, xs []T) []byte {
	b = appendArrayLen(b, len(xs))
	for _, x := range xs {
		b = appendInt(b, int64(x))
	}
	return b
}

// appendArrayLen appends an array header for n elements, as
// Encoder.EncodeArrayLen does.
func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, msgpcode.FixedArrayLow|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Array16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Array32), uint32(n))
	}
}

// parseInts fills dst from the integers at the start of b and returns how
// many bytes they took. On an element that is not an integer it returns its
// index and an error, as DecodeInt64 fails on it; on one that does not fit
// T (where DecodeInt64 would wrap it), errNarrow; on one cut short,
// io.ErrUnexpectedEOF.
func parseInts[T int | int64](b []byte, dst []T) (int, int, error) {
	off := 0
	for i := range dst {
		if off >= len(b) {
			return off, i, io.ErrUnexpectedEOF
		}
		c := b[off]
		off++
		if msgpcode.IsFixedNum(c) {
			dst[i] = T(int8(c))
			continue
		}
		var width int
		switch c {
		case msgpcode.Nil:
			dst[i] = 0
			continue
		case msgpcode.Uint8, msgpcode.Int8:
			width = 1
		case msgpcode.Uint16, msgpcode.Int16:
			width = 2
		case msgpcode.Uint32, msgpcode.Int32:
			width = 4
		case msgpcode.Uint64, msgpcode.Int64:
			width = 8
		default:
			return off, i, fmt.Errorf("codec: not an integer: MessagePack code %#x", c)
		}
		if len(b)-off < width {
			return off, i, io.ErrUnexpectedEOF
		}
		p := b[off : off+width]
		off += width
		var v int64
		switch c {
		case msgpcode.Uint8:
			v = int64(p[0])
		case msgpcode.Int8:
			v = int64(int8(p[0]))
		case msgpcode.Uint16:
			v = int64(binary.BigEndian.Uint16(p))
		case msgpcode.Int16:
			v = int64(int16(binary.BigEndian.Uint16(p)))
		case msgpcode.Uint32:
			v = int64(binary.BigEndian.Uint32(p))
		case msgpcode.Int32:
			v = int64(int32(binary.BigEndian.Uint32(p)))
		case msgpcode.Uint64:
			u := binary.BigEndian.Uint64(p)
			if u > math.MaxInt64 {
				return off, i, fmt.Errorf("%w: %d does not fit in %T", errNarrow, u, dst[i])
			}
			v = int64(u)
		default:
			v = int64(binary.BigEndian.Uint64(p))
		}
		if int64(T(v)) != v { // int on a 32-bit platform
			return off, i, fmt.Errorf("%w: %d does not fit in %T", errNarrow, v, dst[i])
		}
		dst[i] = T(v)
	}
	return off, 0, nil
}

// encodeInts encodes xs as a frame if they are ints or int64s, each at most 9
// bytes, so within any maxElem of 9 or more (or none).
func encodeInts[T any](xs []T, maxElem int) ([]byte, bool) {
	if maxElem > 0 && maxElem < 9 {
		return nil, false
	}
	switch v := any(xs).(type) {
	case []int:
		return appendInts(make([]byte, 0, 5+9*len(v)), v), true
	case []int64:
		return appendInts(make([]byte, 0, 5+9*len(v)), v), true
	}
	return nil, false
}

// isInts reports whether dst takes the integer fast path.
func isInts[T any](dst []T) bool {
	switch any(dst).(type) {
	case []int, []int64:
		return true
	}
	return false
}

// decodeInts decodes the elements b holds (a frame past its array header)
// into dst, which isInts, and returns how many bytes they took.
func decodeInts[T any](b []byte, dst []T) (used, index int, err error) {
	switch v := any(dst).(type) {
	case []int:
		return parseInts(b, v)
	case []int64:
		return parseInts(b, v)
	}
	panic("codec: decodeInts on " + fmt.Sprintf("%T", dst))
}
