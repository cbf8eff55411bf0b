// Package tasks is version 2 of a user's shared task package, for tests of
// type fingerprints: its Doc prints as tasks.Doc, like version 1's, but its
// fields differ.
package tasks

import (
	"context"
	"strings"

	"github.com/redmap/redmap"
)

// Doc is a document as version 2 has it: Text became Title and Body.
type Doc struct {
	ID    string
	Title string
	Body  string
	Tags  []string
}

// Out counts a document's words.
type Out struct {
	ID    string
	Words int
	Extra string
}

// Count counts the words of a Doc.
var Count = redmap.Func("count", func(_ context.Context, d Doc) (Out, error) {
	return Out{ID: d.ID, Words: len(strings.Fields(d.Title + " " + d.Body))}, nil
})
