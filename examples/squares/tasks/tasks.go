// Package tasks holds the functions of the squares example, imported by both
// its worker and its manager.
package tasks

import (
	"context"

	"github.com/redmap/redmap"
)

// Square returns x*x.
var Square = redmap.Func("square", func(_ context.Context, x int) (int, error) {
	return x * x, nil
})
