// Package tasks is version 1 of a user's shared task package, for tests of
// type fingerprints: its Doc prints as tasks.Doc, like version 2's.
package tasks

import (
	"context"
	"strings"

	"github.com/redmap/redmap"
)

// Doc is a document as version 1 has it.
type Doc struct {
	ID   string
	Text string
}

// Out counts a document's words.
type Out struct {
	ID    string
	Words int
}

// Count counts the words of a Doc.
var Count = redmap.Func("count", func(_ context.Context, d Doc) (Out, error) {
	return Out{ID: d.ID, Words: len(strings.Fields(d.Text))}, nil
})
