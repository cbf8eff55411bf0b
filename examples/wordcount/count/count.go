// Package count is the word count both sides of examples/wordcount share: the
// function the workers map over groups of files, and the reducer that merges
// their counts.
package count

import (
	"context"
	"encoding/binary"
	"errors"
	"os"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/redmap/redmap"
)

// Counts maps each word to how often it occurs. The counts of a group of
// files hold tens of thousands of words, so they travel as one MessagePack
// byte string of (length, word, count) varint records, written and read
// directly: decoding makes one string for all the words, not one per word.
type Counts map[string]int

// EncodeMsgpack writes c as one byte string.
func (c Counts) EncodeMsgpack(enc *msgpack.Encoder) error {
	size := 0
	for w := range c {
		size += len(w) + 2*binary.MaxVarintLen32
	}
	b := make([]byte, 0, size)
	for w, n := range c {
		b = binary.AppendUvarint(b, uint64(len(w)))
		b = append(b, w...)
		b = binary.AppendUvarint(b, uint64(n))
	}
	return enc.EncodeBytes(b)
}

// DecodeMsgpack reads what EncodeMsgpack wrote.
func (c *Counts) DecodeMsgpack(dec *msgpack.Decoder) error {
	b, err := dec.DecodeBytes()
	if err != nil {
		return err
	}
	s := string(b) // the words are substrings of this one string
	m := make(Counts, len(s)/12)
	for off := 0; off < len(s); {
		l, k := binary.Uvarint(b[off:])
		if k <= 0 || off+k+int(l) > len(s) {
			return errors.New("count: malformed counts")
		}
		off += k
		w := s[off : off+int(l)]
		off += int(l)
		n, k := binary.Uvarint(b[off:])
		if k <= 0 {
			return errors.New("count: malformed counts")
		}
		off += k
		m[w] += int(n)
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
