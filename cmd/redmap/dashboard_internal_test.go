package main

import (
	"net/http"
	"testing"
)

// The dashboard's server times out idle, slow-reading and slow-writing
// clients (issue 35: it had only ReadHeaderTimeout, so an idle keep-alive
// connection was held for ever).
func TestDashboardServerTimeouts(t *testing.T) {
	s := dashboardServer(http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("timeouts: header %v, read %v, write %v, idle %v; max header %d", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes)
	}
}
