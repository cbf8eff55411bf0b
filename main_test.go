package redmap_test

import (
	"testing"

	"github.com/redmap/redmap/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
