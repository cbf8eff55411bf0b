package codec

import (
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// MaxDepth is the deepest nesting of arrays and maps a decoder here accepts:
// a frame nested deeper is corrupt. It bounds the stack a decode can take
// (msgpack recurses once per level); a redmap value is rarely ten deep.
const MaxDepth = 1000

// Why msgpack is not trusted alone with bytes from Redis: it sizes a typed
// slice from the length its header declares (v5.4.1's alloc-limit test,
// `flags&disableAllocLimitFlag != 1`, is always true), reads a string or a
// byte slice in chunks of up to 1 MiB whatever follows, recurses once per
// level of nesting with no limit, and stores an integer into a narrower Go
// integer (or an unsigned one) with no range check: 300 into a uint8 is 44.
//
// So every frame is walked before msgpack decodes it. The walk reads only
// headers and integers, allocates nothing, and refuses:
//   - a length (array, map, string, binary, extension) larger than the bytes
//     that follow it; as every element takes a byte at least, a frame that
//     passes holds at most as many values as it has bytes, so decoding it
//     allocates at most the frame's length times the size of the largest
//     Go type in the value (a slice of float64s: 8 bytes a byte), plus its
//     strings;
//   - nesting deeper than MaxDepth;
//   - an extension other than msgpack's time (see ext);
//   - an integer that does not fit the Go integer it decodes into: a
//     negative one into an unsigned type, or one past the type's range.
// The walk follows the Go type as msgpack would (elements of slices and
// arrays, keys and values of maps, struct fields by their msgpack names or
// positions, through pointers); past a value msgpack hands to an interface or
// to a type's own decoder, it checks the structure only.

// errNarrow reports an integer that does not fit its Go type.
var errNarrow = errors.New("codec: integer out of range")

// plan is what the walk knows of the Go type a value decodes into.
type plan struct {
	kind   planKind
	bits   int              // intPlan, uintPlan: the width
	name   string           // intPlan, uintPlan: the Go type, for errors
	elem   *plan            // seqPlan: elements; mapPlan: values
	key    *plan            // mapPlan: keys
	fields map[string]*plan // structPlan: fields by name
	names  []string         // structPlan: names in the order of the array form
	list   []*plan          // structPlan: their plans
}

type planKind uint8

const (
	anyPlan    planKind = iota // nothing to check past the structure
	intPlan                    // a signed integer of bits
	uintPlan                   // an unsigned integer of bits
	seqPlan                    // a slice or an array
	mapPlan                    // a map
	structPlan                 // a struct
)

// untyped is the plan of a value whose type the walk does not follow.
var untyped = &plan{}

var plans sync.Map // reflect.Type → *plan

// planFor returns the plan of t, built once.
func planFor(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	p := buildPlan(t, map[reflect.Type]*plan{})
	plans.Store(t, p)
	return p
}

var (
	customDecoderType     = reflect.TypeFor[msgpack.CustomDecoder]()
	unmarshalerType       = reflect.TypeFor[msgpack.Unmarshaler]()
	binaryUnmarshalerType = reflect.TypeFor[encoding.BinaryUnmarshaler]()
	textUnmarshalerType   = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether msgpack hands values of t to t's own
// decoder, whose reading the walk cannot follow.
func decodesItself(t reflect.Type) bool {
	for _, u := range []reflect.Type{t, reflect.PointerTo(t)} {
		if u.Implements(customDecoderType) || u.Implements(unmarshalerType) ||
			u.Implements(binaryUnmarshalerType) || u.Implements(textUnmarshalerType) {
			return true
		}
	}
	return false
}

func buildPlan(t reflect.Type, seen map[reflect.Type]*plan) *plan {
	for t.Kind() == reflect.Pointer && !decodesItself(t) {
		t = t.Elem() // msgpack decodes nil as nil, anything else into the element
	}
	if p := seen[t]; p != nil {
		return p
	}
	if decodesItself(t) {
		return untyped
	}
	p := &plan{}
	seen[t] = p // before the elements: a type may hold itself
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.kind, p.bits, p.name = intPlan, t.Bits(), t.String()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		p.kind, p.bits, p.name = uintPlan, t.Bits(), t.String()
	case reflect.Slice, reflect.Array:
		p.kind, p.elem = seqPlan, buildPlan(t.Elem(), seen)
	case reflect.Map:
		p.kind, p.key, p.elem = mapPlan, buildPlan(t.Key(), seen), buildPlan(t.Elem(), seen)
	case reflect.Struct:
		p.kind, p.fields = structPlan, map[string]*plan{}
		structFields(t, p, seen)
	}
	return p
}

// structFields fills p with t's fields as msgpack v5 names and orders them
// (its getFields, with the default "msgpack" tag): a tag's name or the
// field's, "-" and unexported fields left out, embedded structs inlined
// unless they decode themselves or (without ",inline") a name would clash,
// aliases.
func structFields(t reflect.Type, p *plan, seen map[reflect.Type]*plan) {
	add := func(name string, fp *plan) {
		p.fields[name] = fp
		p.names = append(p.names, name)
		p.list = append(p.list, fp)
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if name == "-" || f.PkgPath != "" && !f.Anonymous {
			continue
		}
		if name == "" {
			name = f.Name
		}
		options := strings.Split(opts, ",")
		fp := buildPlan(f.Type, seen)
		if f.Anonymous && !slices.Contains(options, "noinline") && fp.kind == structPlan {
			inline := slices.Contains(options, "inline")
			clash := false
			for _, n := range fp.names {
				_, dup := p.fields[n]
				clash = clash || dup
			}
			if inline || !clash {
				for j, n := range fp.names {
					if _, dup := p.fields[n]; !dup {
						add(n, fp.list[j])
					}
				}
				if inline {
					p.fields[name] = fp
				}
				continue
			}
		}
		add(name, fp)
		for _, o := range options {
			if alias, ok := strings.CutPrefix(o, "alias:"); ok {
				p.fields[alias] = fp
			}
		}
	}
}

// walker reads one frame's structure (see above). off is the next byte.
type walker struct {
	b   []byte
	off int
}

var errShort = io.ErrUnexpectedEOF

// next reads n bytes as a big-endian unsigned integer.
func (w *walker) next(n int) (uint64, error) {
	if len(w.b)-w.off < n {
		return 0, errShort
	}
	p := w.b[w.off : w.off+n]
	w.off += n
	switch n {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	}
	return binary.BigEndian.Uint64(p), nil
}

// skip passes over n bytes of a string, a binary or an extension.
func (w *walker) skip(n uint64) error {
	if n > uint64(len(w.b)-w.off) {
		return corrupt(fmt.Sprintf("a length of %d is larger than the %d bytes left", n, len(w.b)-w.off), nil)
	}
	w.off += int(n)
	return nil
}

// ext walks an extension of n bytes of data, its type byte next. The only
// extension a redmap value holds is msgpack's time (type -1, 4, 8 or 12
// bytes): any other is corrupt. msgpack would decode another's data as a
// value of its own (a map header there sizes a map that no byte of the
// frame backs: 10 bytes once allocated 770 KiB, FuzzDecodeValue), and an
// extension a program registered is not a redmap value. A time is one only
// where the Go type is not a map, slice, struct or integer (FuzzDecodeValue
// found a time holding a map header decoded into a map so).
func (w *walker) ext(p *plan, n uint64) error {
	if w.off >= len(w.b) {
		return errShort
	}
	typ := int8(w.b[w.off])
	w.off++
	if typ != -1 || n != 4 && n != 8 && n != 12 {
		return corrupt(fmt.Sprintf("a MessagePack extension of type %d and %d bytes: redmap values hold none but times (type -1, 4, 8 or 12 bytes)", typ, n), nil)
	}
	if p.kind != anyPlan {
		// Where a map, a slice, a struct or an integer is due, msgpack
		// would decode even a time's data as a value of its own.
		return corrupt(fmt.Sprintf("a time (a MessagePack extension) where a %s is due", [...]string{intPlan: "integer", uintPlan: "integer", seqPlan: "slice", mapPlan: "map", structPlan: "struct"}[p.kind]), nil)
	}
	return w.skip(n)
}

// value walks one value that decodes as p says, depth levels down.
func (w *walker) value(p *plan, depth int) error {
	if w.off >= len(w.b) {
		return errShort
	}
	c := w.b[w.off]
	w.off++
	switch {
	case c <= msgpcode.PosFixedNumHigh:
		return p.fitsUint(uint64(c))
	case c >= msgpcode.NegFixedNumLow:
		return p.fitsInt(int64(int8(c)))
	case c >= msgpcode.FixedMapLow && c <= msgpcode.FixedMapHigh:
		return w.mapping(p, uint64(c&0x0f), depth)
	case c >= msgpcode.FixedArrayLow && c <= msgpcode.FixedArrayHigh:
		return w.seq(p, uint64(c&0x0f), depth)
	case c >= msgpcode.FixedStrLow && c <= msgpcode.FixedStrHigh:
		return w.skip(uint64(c & 0x1f))
	}
	var width int
	switch c {
	case msgpcode.Nil, msgpcode.False, msgpcode.True:
		return nil
	case msgpcode.Float:
		return w.skip(4)
	case msgpcode.Double:
		return w.skip(8)
	case msgpcode.FixExt1, msgpcode.FixExt2, msgpcode.FixExt4, msgpcode.FixExt8, msgpcode.FixExt16:
		return w.ext(p, 1<<(c-msgpcode.FixExt1))
	case msgpcode.Uint8, msgpcode.Int8, msgpcode.Bin8, msgpcode.Str8, msgpcode.Ext8:
		width = 1
	case msgpcode.Uint16, msgpcode.Int16, msgpcode.Bin16, msgpcode.Str16, msgpcode.Ext16, msgpcode.Array16, msgpcode.Map16:
		width = 2
	case msgpcode.Uint32, msgpcode.Int32, msgpcode.Bin32, msgpcode.Str32, msgpcode.Ext32, msgpcode.Array32, msgpcode.Map32:
		width = 4
	case msgpcode.Uint64, msgpcode.Int64:
		width = 8
	default:
		return corrupt(fmt.Sprintf("MessagePack code %#x is never used", c), nil)
	}
	n, err := w.next(width)
	if err != nil {
		return err
	}
	switch c {
	case msgpcode.Uint8, msgpcode.Uint16, msgpcode.Uint32, msgpcode.Uint64:
		return p.fitsUint(n)
	case msgpcode.Int8:
		return p.fitsInt(int64(int8(n)))
	case msgpcode.Int16:
		return p.fitsInt(int64(int16(n)))
	case msgpcode.Int32:
		return p.fitsInt(int64(int32(n)))
	case msgpcode.Int64:
		return p.fitsInt(int64(n))
	case msgpcode.Bin8, msgpcode.Bin16, msgpcode.Bin32, msgpcode.Str8, msgpcode.Str16, msgpcode.Str32:
		return w.skip(n)
	case msgpcode.Ext8, msgpcode.Ext16, msgpcode.Ext32:
		return w.ext(p, n)
	case msgpcode.Array16, msgpcode.Array32:
		return w.seq(p, n, depth)
	}
	return w.mapping(p, n, depth)
}

// seq walks the n elements of an array.
func (w *walker) seq(p *plan, n uint64, depth int) error {
	if depth >= MaxDepth {
		return corrupt(fmt.Sprintf("nested deeper than %d", MaxDepth), nil)
	}
	if n > uint64(len(w.b)-w.off) {
		return corrupt(fmt.Sprintf("an array of %d is longer than the %d bytes left", n, len(w.b)-w.off), nil)
	}
	for i := range int(n) {
		e := untyped
		switch p.kind {
		case seqPlan:
			e = p.elem
		case structPlan:
			if i < len(p.list) {
				e = p.list[i]
			}
		}
		if err := w.value(e, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// mapping walks the n entries of a map.
func (w *walker) mapping(p *plan, n uint64, depth int) error {
	if depth >= MaxDepth {
		return corrupt(fmt.Sprintf("nested deeper than %d", MaxDepth), nil)
	}
	if n > uint64(len(w.b)-w.off)/2 {
		return corrupt(fmt.Sprintf("a map of %d is longer than the %d bytes left", n, len(w.b)-w.off), nil)
	}
	for range int(n) {
		k, v := untyped, untyped
		switch p.kind {
		case mapPlan:
			k, v = p.key, p.elem
		case structPlan:
			if name, ok := w.peekString(); ok {
				if fp := p.fields[string(name)]; fp != nil { // no allocation: a lookup by bytes
					v = fp
				}
			}
		}
		if err := w.value(k, depth+1); err != nil {
			return err
		}
		if err := w.value(v, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// peekString returns the bytes of the string at the walker's position, if
// there is one, without moving.
func (w *walker) peekString() ([]byte, bool) {
	if w.off >= len(w.b) {
		return nil, false
	}
	c, start, n := w.b[w.off], w.off+1, 0
	switch {
	case c >= msgpcode.FixedStrLow && c <= msgpcode.FixedStrHigh:
		n = int(c & 0x1f)
	case c == msgpcode.Str8 && start+1 <= len(w.b):
		n, start = int(w.b[start]), start+1
	case c == msgpcode.Str16 && start+2 <= len(w.b):
		n, start = int(binary.BigEndian.Uint16(w.b[start:])), start+2
	default:
		return nil, false
	}
	if n > len(w.b)-start {
		return nil, false
	}
	return w.b[start : start+n], true
}

// fitsUint checks a non-negative integer against p.
func (p *plan) fitsUint(v uint64) error {
	switch {
	case p.kind == intPlan && v > uint64(math.MaxInt64>>(64-p.bits)):
		return fmt.Errorf("%w: %d does not fit in %s", errNarrow, v, p.name)
	case p.kind == uintPlan && p.bits < 64 && v >= 1<<p.bits:
		return fmt.Errorf("%w: %d does not fit in %s", errNarrow, v, p.name)
	}
	return nil
}

// fitsInt checks a possibly negative integer against p.
func (p *plan) fitsInt(v int64) error {
	if v >= 0 {
		return p.fitsUint(uint64(v))
	}
	switch {
	case p.kind == uintPlan:
		return fmt.Errorf("%w: %d does not fit in %s", errNarrow, v, p.name)
	case p.kind == intPlan && p.bits < 64 && v < -1<<(p.bits-1):
		return fmt.Errorf("%w: %d does not fit in %s", errNarrow, v, p.name)
	}
	return nil
}

// arrayLen reads an array header whose length the bytes that follow can
// hold.
func (w *walker) arrayLen() (int, error) {
	if w.off >= len(w.b) {
		return 0, errShort
	}
	c := w.b[w.off]
	w.off++
	var n uint64
	var err error
	switch {
	case c >= msgpcode.FixedArrayLow && c <= msgpcode.FixedArrayHigh:
		n = uint64(c & 0x0f)
	case c == msgpcode.Array16:
		n, err = w.next(2)
	case c == msgpcode.Array32:
		n, err = w.next(4)
	default:
		return 0, fmt.Errorf("codec: want an array, found MessagePack code %#x", c)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(len(w.b)-w.off) {
		return 0, fmt.Errorf("codec: an array of %d is longer than the %d bytes left", n, len(w.b)-w.off)
	}
	return int(n), nil
}

// check walks b, which must hold exactly one value that decodes into t.
func check(b []byte, t reflect.Type) error {
	w := walker{b: b}
	if err := w.value(planFor(t), 0); err != nil {
		return err
	}
	if w.off != len(b) {
		return corrupt("trailing bytes", nil)
	}
	return nil
}

// checkOne walks the one value at the start of b, of any type, and returns
// its length.
func checkOne(b []byte) (int, error) {
	w := walker{b: b}
	err := w.value(untyped, 0)
	return w.off, err
}
