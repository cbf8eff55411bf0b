package connect_test

import (
	"log/slog"
	"testing"

	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis logs the failed dials of the tests that expect them.
	connect.RouteLogs(slog.New(slog.DiscardHandler))
	redistest.Main(m)
}
