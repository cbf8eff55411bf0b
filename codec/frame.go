package codec

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// writer encodes MessagePack into a buffer and keeps the first error, so a
// sequence of fields reads as a sequence of calls.
type writer struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
	err error
}

// writers and readers are pooled with their msgpack encoders and decoders:
// a worker encodes a result and decodes a task per task, a manager the
// reverse.
var (
	writers = sync.Pool{New: func() any { return new(writer) }}
	readers = sync.Pool{New: func() any { return new(reader) }}
)

// newWriter returns a writer from the pool, with an encoder from msgpack's;
// result gives both back.
func newWriter(size int) *writer {
	w := writers.Get().(*writer)
	w.buf.Grow(size)
	w.enc = msgpack.GetEncoder()
	w.enc.Reset(&w.buf)
	return w
}

func (w *writer) do(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) arrayLen(n int) { w.do(w.enc.EncodeArrayLen(n)) }
func (w *writer) int(v int)      { w.do(w.enc.EncodeInt(int64(v))) }
func (w *writer) str(s string)   { w.do(w.enc.EncodeString(s)) }
func (w *writer) bytes(b []byte) { w.do(w.enc.EncodeBytes(b)) }
func (w *writer) bool(v bool)    { w.do(w.enc.EncodeBool(v)) }

// result returns what w encoded, and gives its encoder back to the pool: w
// writes nothing after it.
func (w *writer) result() ([]byte, error) {
	msgpack.PutEncoder(w.enc)
	b, err := w.buf.Bytes(), w.err
	*w = writer{} // the bytes are the caller's now
	writers.Put(w)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// reader decodes MessagePack fields from a frame and keeps the first error;
// after an error every read returns a zero value.
type reader struct {
	b   []byte
	r   bytes.Reader
	dec *msgpack.Decoder
	err error
}

// newReader returns a reader of b whose decoder comes from msgpack's pool
// (a worker decodes a task, and a manager a result, per task); the caller
// gives it back with release once it has read all it reads. Nothing decoded
// refers to the decoder's buffers: strings and byte slices are copies.
func newReader(b []byte) *reader {
	d := readers.Get().(*reader)
	d.b = b
	d.r.Reset(b)
	d.dec = msgpack.GetDecoder()
	d.dec.Reset(&d.r)
	return d
}

// release gives d and its decoder back to their pools; d reads nothing
// after it.
func (d *reader) release() {
	msgpack.PutDecoder(d.dec)
	*d = reader{}
	readers.Put(d)
}

// checkNext walks the next value before msgpack reads it, so a string's or a
// binary's length past the frame, or a value nested too deep, is an error
// rather than an allocation or a deep recursion.
func (d *reader) checkNext() bool {
	if d.err != nil {
		return false
	}
	_, err := checkOne(d.b[len(d.b)-d.r.Len():])
	return d.do(err)
}

func (d *reader) do(err error) bool {
	if d.err == nil && err != nil {
		d.err = err
	}
	return d.err == nil
}

// arrayLen reads an array header and checks that the frame has at least one
// byte left per declared element, so a forged length cannot make a caller
// allocate more than the frame's size.
func (d *reader) arrayLen() int { return d.arrayOf(1) }

// arrayOf reads an array header whose elements take at least size bytes
// each, and checks that the frame has that many left.
func (d *reader) arrayOf(size int) int {
	if d.err != nil {
		return 0
	}
	n, err := d.dec.DecodeArrayLen()
	if !d.do(err) {
		return 0
	}
	if n < 0 || n > d.r.Len()/size {
		d.do(corrupt("array length", nil))
		return 0
	}
	return n
}

func (d *reader) int() int {
	if d.err != nil {
		return 0
	}
	v, err := d.dec.DecodeInt()
	d.do(err)
	return v
}

func (d *reader) str() string {
	if !d.checkNext() {
		return ""
	}
	s, err := d.dec.DecodeString()
	d.do(err)
	return s
}

func (d *reader) bool() bool {
	if d.err != nil {
		return false
	}
	v, err := d.dec.DecodeBool()
	d.do(err)
	return v
}

func (d *reader) bytes() []byte {
	if !d.checkNext() {
		return nil
	}
	b, err := d.dec.DecodeBytes()
	d.do(err)
	return b
}

// pairs reads an array of at most limit keys and values, all strings, as a
// map; nil if it is empty.
func (d *reader) pairs(limit int) map[string]string {
	n := d.arrayLen()
	if n%2 != 0 || n > 2*limit {
		d.do(corrupt(fmt.Sprintf("pairs: %d strings, want an even number up to %d", n, 2*limit), nil))
		return nil
	}
	var m map[string]string
	for i := 0; i < n && d.err == nil; i += 2 {
		k, v := d.str(), d.str()
		if m == nil {
			m = make(map[string]string, n/2)
		}
		m[k] = v
	}
	return m
}

// skip passes over one value, whatever it is.
func (d *reader) skip() {
	if d.checkNext() {
		d.do(d.dec.Skip())
	}
}

// end reports the first error, or an error if bytes are left over.
func (d *reader) end(what string) error {
	if d.err != nil {
		return corrupt(what, d.err)
	}
	if d.r.Len() != 0 {
		return corrupt(what+": trailing bytes", nil)
	}
	return nil
}

func (d *reader) fail(what, why string) error {
	return corrupt(what+": "+why, d.err)
}
