package codec

import (
	"bytes"
	"fmt"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"
)

// EncodeValue encodes one value, such as a batch's constant data.
// Encoding is deterministic: equal values give equal bytes, maps included
// (their entries are ordered by key), so equal constants hash equal.
func EncodeValue[T any](v *T) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	if err := encodeOne(enc, v); err != nil {
		return nil, err
	}
	if mayHoldMap(reflect.TypeFor[T]()) {
		return canonical(buf.Bytes())
	}
	return buf.Bytes(), nil
}

// DecodeValue decodes one value written by EncodeValue, with the same checks
// as DecodeElements: it never panics, and a value that passes them allocates
// at most its length times the size of the largest Go type it holds.
func DecodeValue[T any](b []byte) (T, error) {
	var v T
	if err := check(b, reflect.TypeFor[T]()); err != nil {
		return v, corrupt("value", err)
	}
	d := newReader(b)
	defer d.release()
	if err := decodeOne(d.dec, &v); err != nil {
		return v, corrupt("value", err)
	}
	return v, d.end("value")
}

// ElementError reports which element of a frame could not be encoded or
// decoded.
type ElementError struct {
	Index int
	Err   error
}

func (e *ElementError) Error() string { return fmt.Sprintf("element %d: %v", e.Index, e.Err) }
func (e *ElementError) Unwrap() error { return e.Err }

// EncodeElements encodes xs as one MessagePack array: one frame per chunk, not
// one value per Redis argument. An element whose encoding is larger than
// maxElem bytes (no cap if maxElem <= 0) gives a *SizeError wrapped in an
// *ElementError naming its index; an unencodable one, the encoder's error.
func EncodeElements[T any](xs []T, maxElem int) ([]byte, error) {
	if b, ok := encodeInts(xs, maxElem); ok {
		return b, nil
	}
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	if err := enc.EncodeArrayLen(len(xs)); err != nil {
		return nil, err
	}
	if ok, err := encodeFast(enc, xs, maxElem); ok {
		if err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	for i := range xs {
		before := buf.Len()
		if err := encodeOne(enc, &xs[i]); err != nil {
			return nil, &ElementError{Index: i, Err: err}
		}
		if size := buf.Len() - before; maxElem > 0 && size > maxElem {
			return nil, &ElementError{Index: i, Err: &SizeError{What: "input", Size: size, Limit: maxElem}}
		}
	}
	return buf.Bytes(), nil
}

// OutputEncoder encodes the outputs of one task, one element at a time, so
// that an element that cannot be encoded fails alone: its slot holds nil and
// the others are kept.
type OutputEncoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

// EncodeOutputs encodes a whole frame of outputs at once when their type has
// a fast path; it reports false otherwise (then use an OutputEncoder).
func EncodeOutputs[T any](ys []T) ([]byte, bool, error) {
	if b, ok := encodeInts(ys, 0); ok {
		return b, true, nil
	}
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	if err := enc.EncodeArrayLen(len(ys)); err != nil {
		return nil, false, err
	}
	ok, err := encodeFast(enc, ys, 0)
	if !ok || err != nil {
		return nil, ok, err
	}
	return buf.Bytes(), true, nil
}

// NewOutputEncoder starts a frame of n outputs.
func NewOutputEncoder(n int) *OutputEncoder {
	e := &OutputEncoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	_ = e.enc.EncodeArrayLen(n) // writes to a bytes.Buffer cannot fail
	return e
}

// Add appends one output. On error the frame is left as it was before the call
// and the caller should AddNil in its place.
func (e *OutputEncoder) Add(v any) error {
	before := e.buf.Len()
	if err := encodeOne(e.enc, v); err != nil {
		e.buf.Truncate(before)
		return err
	}
	return nil
}

// AddNil appends a nil, which decodes as the zero value of any type.
func (e *OutputEncoder) AddNil() { _ = e.enc.EncodeNil() }

// Bytes returns the frame.
func (e *OutputEncoder) Bytes() []byte { return e.buf.Bytes() }

// DecodeElements decodes a frame written by EncodeElements or an
// OutputEncoder into dst, which must have exactly as many elements as the
// frame. The frame is walked first (see walk.go): a length past the bytes
// that follow, nesting deeper than MaxDepth or an integer that does not fit
// its Go type is refused before anything is allocated for it. On an element
// that does not decode it returns an *ElementError with its index; dst[:index]
// are decoded, and the elements from index on are not.
func DecodeElements[T any](frame []byte, dst []T) error {
	w := walker{b: frame}
	n, err := w.arrayLen()
	if err != nil {
		return corrupt("elements", err)
	}
	if n != len(dst) {
		return corrupt(fmt.Sprintf("elements: frame holds %d, want %d", n, len(dst)), nil)
	}
	if rest := frame[w.off:]; isInts(dst) {
		used, i, err := decodeInts(rest, dst)
		if err != nil {
			return &ElementError{Index: i, Err: err}
		}
		if used != len(rest) {
			return corrupt("elements: trailing bytes", nil)
		}
		return nil
	}
	d := newReader(frame)
	defer d.release()
	d.arrayLen()
	if fixedFast(dst) {
		// Floats and bools: each read checks its code, allocates nothing,
		// and dst is already as long as the frame allows.
		if _, i, err := decodeFast(d.dec, dst); err != nil {
			return &ElementError{Index: i, Err: err}
		}
		return d.end("elements")
	}
	// Walk every element before decoding any: the first that fails the walk
	// ends the frame's readable part.
	p, good := planFor(reflect.TypeFor[T]()), n
	var walkErr error
	for i := range n {
		if walkErr = w.value(p, 1); walkErr != nil {
			good = i
			break
		}
	}
	if walkErr == nil && w.off != len(frame) {
		return corrupt("elements: trailing bytes", nil)
	}
	if ok, i, err := decodeFast(d.dec, dst[:good]); ok {
		if err != nil {
			return &ElementError{Index: i, Err: err}
		}
	} else {
		for i := range dst[:good] {
			if err := decodeOne(d.dec, &dst[i]); err != nil {
				return &ElementError{Index: i, Err: err}
			}
		}
	}
	if walkErr != nil {
		return &ElementError{Index: good, Err: walkErr}
	}
	return nil
}

// decodeOne decodes one value, turning a panic inside msgpack (it panics,
// for one, when asked to fill an interface with methods) into an error.
func decodeOne(dec *msgpack.Decoder, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("codec: msgpack panicked: %v", p)
		}
	}()
	return dec.Decode(v)
}

// encodeOne encodes one value, turning a panic inside msgpack (a custom
// encoder of the user's that panics, say) into an error.
func encodeOne(enc *msgpack.Encoder, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("codec: msgpack panicked: %v", p)
		}
	}()
	return enc.Encode(v)
}
