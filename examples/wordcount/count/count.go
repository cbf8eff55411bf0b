// Package count is the word count both sides of examples/wordcount share: the
// function the workers map over groups of files, and the reducer that merges
// their counts.
package count

import (
	"context"
	"os"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/redmap/redmap"
)

// Counts maps each word to how often it occurs. It travels through Redis as
// a MessagePack map, written and read directly rather than by reflection: the
// counts of a group of files hold tens of thousands of words.
type Counts map[string]int

// EncodeMsgpack writes c as a MessagePack map.
func (c Counts) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(len(c)); err != nil {
		return err
	}
	for w, n := range c {
		if err := enc.EncodeString(w); err != nil {
			return err
		}
		if err := enc.EncodeInt(int64(n)); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads a MessagePack map into c.
func (c *Counts) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	m := make(Counts, max(n, 0))
	for range n {
		w, err := dec.DecodeString()
		if err != nil {
			return err
		}
		k, err := dec.DecodeInt()
		if err != nil {
			return err
		}
		m[w] += k
	}
	*c = m
	return nil
}

// Files counts the words of the files at paths. A word is a maximal run of
// ASCII letters, digits and '_'.
var Files = redmap.Func("wordcount.files", countFiles)

// Merge adds the counts of b to a: associative and commutative, as a
// reducer must be.
var Merge = redmap.Reduce("wordcount.merge", merge)

// Words adds the words of text to counts.
func Words(text []byte, counts Counts) {
	start := -1
	for i, c := range text {
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			counts[string(text[start:i])]++
			start = -1
		}
	}
	if start >= 0 {
		counts[string(text[start:])]++
	}
}

// countFiles is Files's function.
func countFiles(_ context.Context, paths []string) (Counts, error) {
	counts := make(Counts)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		Words(b, counts)
	}
	return counts, nil
}

// merge is Merge's function.
func merge(_ context.Context, a, b Counts) (Counts, error) {
	if len(a) < len(b) {
		a, b = b, a
	}
	for w, n := range b {
		a[w] += n
	}
	return a, nil
}
