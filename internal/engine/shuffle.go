package engine

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/redmap/redmap/codec"
)

// Shuffler is an emitter as a worker runs it in a map/reduce by key
// (manager.ReduceByKey): the map side combines and partitions a task's
// pairs, the reduce side folds one partition's partials.
type Shuffler interface {
	// Combine runs the emitter over a frame of count inputs under policy
	// p, folds the pairs of each key with red, and returns one partial per
	// partition (an encoded Pairs, empty ones included) and the number of
	// distinct keys in all; nil partials if no element succeeded. An
	// element whose emitter failed contributes no pair. If red fails to
	// fold, every element fails (codec.KindReduce): the task's partials
	// would otherwise hold part of an element.
	Combine(ctx context.Context, count int, input []byte, p Policy, red *Runtime, parts int) (partials [][]byte, keys int, fails []codec.Failure)
	// Merge folds partials (encoded Pairs of one partition) per key with
	// red and returns the result as pages of encoded Pairs, each about
	// page bytes, and the number of keys. A partial that does not decode,
	// or a fold that fails, is a failure saying which.
	Merge(ctx context.Context, partials [][]byte, red *Runtime, page int) (pages [][]byte, keys int, f *codec.Failure)
}

// Shuffler returns the runtime's Shuffler if it is an emitter's.
func (rt *Runtime) Shuffler() (Shuffler, bool) {
	s, ok := rt.shuffle.(Shuffler)
	return s, ok
}

// Pairs is a run of key/value pairs: a partial of a partition, or a page
// of a reduced partition. K[i] goes with V[i]. It travels as a pairsFrame
// (EncodePairs, DecodePairs).
type Pairs[K comparable, V any] struct {
	K []K
	V []V
}

// pairsFrame is Pairs as it travels: its length, and its keys and its
// values each as a codec element frame, so that keys and values of the
// types codec has fast paths for (integers, strings, floats) are written
// and read without reflection.
type pairsFrame struct {
	N int    `msgpack:"n"`
	K []byte `msgpack:"k"`
	V []byte `msgpack:"v"`
}

// EncodePairs returns the wire form of ps.
func EncodePairs[K comparable, V any](ps *Pairs[K, V]) ([]byte, error) {
	k, err := codec.EncodeElements(ps.K, 0)
	if err != nil {
		return nil, err
	}
	v, err := codec.EncodeElements(ps.V, 0)
	if err != nil {
		return nil, err
	}
	return codec.EncodeValue(&pairsFrame{N: len(ps.K), K: k, V: v})
}

// DecodePairs decodes what EncodePairs wrote, with codec's checks (it
// never panics, and allocates in proportion to b).
func DecodePairs[K comparable, V any](b []byte) (Pairs[K, V], error) {
	f, err := codec.DecodeValue[pairsFrame](b)
	if err != nil {
		return Pairs[K, V]{}, err
	}
	// Every element takes a byte at least: a count above the bytes is a
	// lie, refused before anything is allocated for it.
	if f.N < 0 || f.N > len(f.K) || f.N > len(f.V) {
		return Pairs[K, V]{}, fmt.Errorf("%w: pairs: %d pairs in %d and %d bytes", codec.ErrCorrupt, f.N, len(f.K), len(f.V))
	}
	ps := Pairs[K, V]{K: make([]K, f.N), V: make([]V, f.N)}
	if err := codec.DecodeElements(f.K, ps.K); err != nil {
		return Pairs[K, V]{}, fmt.Errorf("keys: %w", err)
	}
	if err := codec.DecodeElements(f.V, ps.V); err != nil {
		return Pairs[K, V]{}, fmt.Errorf("values: %w", err)
	}
	return ps, nil
}

// PartitionOf returns the partition of key k among parts: a hash of its
// value that every process computes alike (FNV-1a of its bytes for strings
// and integers, of its MessagePack encoding otherwise), so that the pairs
// of one key from every map task meet in one partition.
func PartitionOf[K comparable](k K, parts int) int {
	if parts <= 1 {
		return 0
	}
	h := fnv.New64a()
	var b [8]byte
	putInt := func(u uint64) {
		for i := range b {
			b[i] = byte(u >> (8 * i))
		}
		h.Write(b[:])
	}
	switch v := any(k).(type) {
	case string:
		h.Write([]byte(v))
	case int:
		putInt(uint64(v))
	case int64:
		putInt(uint64(v))
	case int32:
		putInt(uint64(v))
	case uint64:
		putInt(v)
	case uint32:
		putInt(uint64(v))
	case uint:
		putInt(uint64(v))
	default:
		enc, err := msgpack.Marshal(k)
		if err != nil {
			return 0 // a key that cannot be encoded fails where it is encoded, with its reason
		}
		h.Write(enc)
	}
	return int(h.Sum64() % uint64(parts))
}

// Emit returns the runtime of an emitter of pairs of K and V for each input
// of In. As a plain function it runs nothing: a task must say it is a
// map/reduce by key's (codec.Task.Shuffle).
func Emit[In any, K comparable, V any](name, sig string, types []string, fn func(context.Context, In, func(K, V)) error) *Runtime {
	return &Runtime{name: name, sig: sig, types: types, shuffle: emitter[In, K, V]{fn: fn},
		run: func(context.Context, any, int, []byte, Policy, *Runtime) ([]byte, []codec.Failure) {
			return nil, []codec.Failure{{Index: -1, Kind: codec.KindUnknownFunc,
				Msg: fmt.Sprintf("%q is an emitter: it runs in a map/reduce by key (manager.ReduceByKey), not a map", name)}}
		}}
}

// emitter is the Shuffler of an emitter's function.
type emitter[In any, K comparable, V any] struct {
	fn func(context.Context, In, func(K, V)) error
}

// pair is one emitted pair, kept until its element's run succeeds.
type pair[K comparable, V any] struct {
	k K
	v V
}

// Combine implements Shuffler.
func (e emitter[In, K, V]) Combine(ctx context.Context, count int, input []byte, p Policy, red *Runtime, parts int) ([][]byte, int, []codec.Failure) {
	xs, decodeFail := decodeInputs[In](count, input)
	partials, keys, cf := e.CombineChain(ctx, nil, xs, p, red, parts)
	fails := make([]codec.Failure, len(cf), len(cf)+1)
	for i, f := range cf {
		fails[i] = f.Failure
	}
	if len(fails) == 1 && fails[0].Kind == codec.KindReduce && fails[0].Index == 0 && fails[0].Through == len(xs)-1 {
		fails[0].Through = count - 1 // a fold that failed fails the whole task
		return nil, 0, fails
	}
	if decodeFail != nil {
		fails = append(fails, *decodeFail)
	}
	return partials, keys, fails
}

// CombineChain implements Boundary. The emitter is the chain's end: its
// step is len(steps), and it folds each run's pairs into the task's as the
// run succeeds.
func (e emitter[In, K, V]) CombineChain(ctx context.Context, steps []Step, xs any, p Policy, red *Runtime, parts int) ([][]byte, int, []ChainFail) {
	fold, ok := FolderOf[V](red)
	if !ok {
		return nil, 0, []ChainFail{{Step: len(steps), Failure: codec.Failure{Index: -1, Kind: codec.KindTypeMismatch,
			Msg: fmt.Sprintf("reducer %q (%s) does not fold the emitter's value type %v", red.Name(), red.Signature(), reflect.TypeFor[V]())}}}
	}
	parts = max(parts, 1)
	// One map for the task: a pair costs one lookup, and a key is hashed
	// to its partition once, when the partials are cut.
	acc := make(map[K]V)
	succeeded := 0
	end := func(step int, st *chainState) (any, func(), func() *codec.Failure) {
		// out holds one run's pairs until it succeeds.
		var out []pair[K, V]
		emit := func(k K, v V) { out = append(out, pair[K, V]{k, v}) }
		sink := func(ctx context.Context, x In) error {
			defer st.panicked(step)
			err := e.fn(ctx, x, emit)
			if err != nil {
				st.failed(step)
			}
			return err
		}
		drop := func() { out = out[:0] }
		keep := func() *codec.Failure {
			succeeded++
			for _, pr := range out {
				old, seen := acc[pr.k]
				if !seen {
					acc[pr.k] = pr.v
					continue
				}
				z, f := fold.FoldTask(ctx, old, pr.v)
				if f != nil {
					return f
				}
				acc[pr.k] = z
			}
			out = out[:0]
			return nil
		}
		return sink, drop, keep
	}
	build := func() *chainRun { return bindChain(steps, end) }
	var d driver = e
	if len(steps) > 0 {
		d = steps[0]
	}
	fails, foldFail := d.drive(ctx, xs, p, build)
	n := lenOf(xs)
	if foldFail != nil {
		return nil, 0, []ChainFail{{Step: len(steps), Failure: codec.Failure{Index: 0, Through: max(n-1, 0), Kind: codec.KindReduce,
			Msg: "combining the task's pairs: " + foldFail.Msg, Stack: foldFail.Stack}}}
	}
	if succeeded == 0 {
		return nil, 0, fails
	}
	cut := make([]Pairs[K, V], parts)
	for k, v := range acc {
		c := &cut[PartitionOf(k, parts)]
		c.K = append(c.K, k)
		c.V = append(c.V, v)
	}
	partials := make([][]byte, parts)
	for i := range cut {
		b, err := EncodePairs(&cut[i])
		if err != nil {
			return nil, 0, []ChainFail{{Step: len(steps), Failure: codec.Failure{Index: 0, Through: max(n-1, 0), Kind: codec.KindEncode,
				Msg: fmt.Sprintf("pairs as (%v, %v): %v", reflect.TypeFor[K](), reflect.TypeFor[V](), err)}}}
		}
		partials[i] = b
	}
	return partials, len(acc), fails
}

func (emitter[In, K, V]) drive(ctx context.Context, xs any, p Policy, build func() *chainRun) ([]ChainFail, *codec.Failure) {
	return drive[In](ctx, xs, p, build)
}

// Merge implements Shuffler.
func (e emitter[In, K, V]) Merge(ctx context.Context, partials [][]byte, red *Runtime, page int) ([][]byte, int, *codec.Failure) {
	acc, f := e.merge(ctx, partials, red)
	if f != nil {
		return nil, 0, f
	}
	pages, err := paginate(acc, page)
	if err != nil {
		return nil, 0, &codec.Failure{Index: -1, Kind: codec.KindEncode, Msg: fmt.Sprintf("pairs as (%v, %v): %v", reflect.TypeFor[K](), reflect.TypeFor[V](), err)}
	}
	return pages, len(acc), nil
}

// FoldValues implements Boundary.
func (e emitter[In, K, V]) FoldValues(ctx context.Context, partials [][]byte, red *Runtime) (any, *codec.Failure) {
	acc, f := e.merge(ctx, partials, red)
	if f != nil {
		return nil, f
	}
	kvs := make([]KV[K, V], 0, len(acc))
	for k, v := range acc {
		kvs = append(kvs, KV[K, V]{Key: k, Value: v})
	}
	return kvs, nil
}

// merge folds partials (encoded Pairs of one partition) per key with red.
func (e emitter[In, K, V]) merge(ctx context.Context, partials [][]byte, red *Runtime) (map[K]V, *codec.Failure) {
	fold, ok := FolderOf[V](red)
	if !ok {
		return nil, &codec.Failure{Index: -1, Kind: codec.KindTypeMismatch,
			Msg: fmt.Sprintf("reducer %q (%s) does not fold the emitter's value type %v", red.Name(), red.Signature(), reflect.TypeFor[V]())}
	}
	acc := make(map[K]V)
	for i, b := range partials {
		ps, err := DecodePairs[K, V](b)
		if err != nil {
			return nil, &codec.Failure{Index: -1, Kind: codec.KindDecode, Msg: fmt.Sprintf("partial %d as (%v, %v): %v", i, reflect.TypeFor[K](), reflect.TypeFor[V](), err)}
		}
		for j, k := range ps.K {
			old, seen := acc[k]
			if !seen {
				acc[k] = ps.V[j]
				continue
			}
			z, f := fold.FoldTask(ctx, old, ps.V[j])
			if f != nil {
				f.Index = -1
				f.Msg = fmt.Sprintf("folding key %v: %s", k, f.Msg)
				return nil, f
			}
			acc[k] = z
		}
	}
	return acc, nil
}

// In implements Boundary.
func (emitter[In, K, V]) In() reflect.Type { return reflect.TypeFor[In]() }

// Out implements Boundary.
func (emitter[In, K, V]) Out() reflect.Type { return reflect.TypeFor[KV[K, V]]() }

// Decode implements Boundary.
func (emitter[In, K, V]) Decode(count int, input []byte) (any, *codec.Failure) {
	return decodeInputs[In](count, input)
}

// maxKeyText caps a key as an error prints it.
const maxKeyText = 200

// KeyOf implements Boundary.
func (emitter[In, K, V]) KeyOf(kvs any, i int) string {
	all, ok := kvs.([]KV[K, V])
	if !ok || i < 0 || i >= len(all) {
		return ""
	}
	s := fmt.Sprintf("%v", all[i].Key)
	if len(s) > maxKeyText {
		s = s[:maxKeyText] + "…"
	}
	return s
}

// Pages implements Boundary.
func (emitter[In, K, V]) Pages(kvs any, page int) ([][]byte, error) {
	return pagesOf[KV[K, V]](kvs, page)
}

// paginate encodes the pairs of m as pages of about page bytes each (one at
// least, empty if m is): it sizes each page from the bytes a pair took on
// the page before.
func paginate[K comparable, V any](m map[K]V, page int) ([][]byte, error) {
	if len(m) == 0 {
		b, err := EncodePairs(&Pairs[K, V]{})
		return [][]byte{b}, err
	}
	var pages [][]byte
	per := 64 // pairs on the first page, to measure them
	ps := Pairs[K, V]{}
	flush := func() error {
		b, err := EncodePairs(&ps)
		if err != nil {
			return err
		}
		pages = append(pages, b)
		perPair := max(float64(len(b))/float64(len(ps.K)), 1)
		per = int(min(max(float64(page)/perPair, 1), math.MaxInt32))
		ps.K, ps.V = ps.K[:0], ps.V[:0]
		return nil
	}
	for k, v := range m {
		ps.K = append(ps.K, k)
		ps.V = append(ps.V, v)
		if len(ps.K) >= per {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if len(ps.K) > 0 {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return pages, nil
}
