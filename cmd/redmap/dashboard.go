package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/dashboard"
)

// tokenEnv names the variable that holds the dashboard's operator token.
const tokenEnv = "REDMAP_DASHBOARD_TOKEN"

// dashboardFlags are the dashboard command's settings.
type dashboardFlags struct {
	prefix, queue, addr        string
	hosts                      []string // -host: names it answers to besides IPs and localhost
	actions, private           bool
	tokenFile, tlsCert, tlsKey string
}

// serveDashboard serves the dashboard on f.addr until SIGINT or SIGTERM. It
// prints "dashboard http://<address>/" (https with TLS) once it listens
// (the address the system gave, for -addr 127.0.0.1:0), and "operator
// token <token>" first if it made one.
func serveDashboard(client redis.UniversalClient, f dashboardFlags, out io.Writer) (int, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return 2, usageError{"dashboard: -tls-cert and -tls-key go together"}
	}
	token, made, err := operatorToken(f)
	if err != nil {
		return 2, usageError{err.Error()}
	}
	d, err := dashboard.New(client, dashboard.Options{Prefix: f.prefix, Queue: f.queue, Actions: f.actions,
		Private: f.private, Token: token, Hosts: f.hosts, Logger: log})
	if err != nil {
		return 2, usageError{err.Error()}
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return 1, fmt.Errorf("dashboard: %w", err)
	}
	srv := dashboardServer(d)
	defer shutdownOnSignal(srv)()
	if made {
		fmt.Fprintf(out, "operator token %s\n", token)
	}
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	fmt.Fprintf(out, "dashboard %s://%s/\n", scheme, ln.Addr())
	if f.actions {
		log.Info("actions are on, for operators with the token", "addr", ln.Addr().String())
	}
	if f.tlsCert != "" {
		err = srv.ServeTLS(ln, f.tlsCert, f.tlsKey)
	} else {
		err = srv.Serve(ln)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return 1, fmt.Errorf("dashboard: %w", err)
	}
	return 0, nil
}

// shutdownOnSignal shuts srv down (its Serve then returns) at SIGINT or
// SIGTERM; stop stops listening for them.
func shutdownOnSignal(srv *http.Server) (stop func()) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return stop
}

// dashboardServer returns the server of the dashboard d, with timeouts, so
// a client that opens connections and sends nothing, reads nothing or
// keeps them idle cannot hold them (and their goroutines) for ever.
func dashboardServer(d http.Handler) *http.Server {
	return &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
}

// operatorToken returns the operator token: from -token-file, else from
// REDMAP_DASHBOARD_TOKEN. With -actions or -private and neither, it makes a
// random one if the dashboard listens on a loopback address only (made is
// then true: the caller prints it for the operator who started it), and
// refuses otherwise: anyone on the network could act.
func operatorToken(f dashboardFlags) (token string, made bool, err error) {
	token = os.Getenv(tokenEnv)
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return "", false, fmt.Errorf("dashboard: -token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return "", false, fmt.Errorf("dashboard: -token-file %s is empty", f.tokenFile)
		}
	}
	if token != "" || !f.actions && !f.private {
		return token, false, nil
	}
	if !loopback(f.addr) {
		what, risk := "-actions", "drain workers and purge queues"
		if !f.actions {
			what, risk = "-private", "read what it keeps private"
		}
		return "", false, fmt.Errorf("dashboard: %s on %s, which is not a loopback address, needs an operator token (%s, or -token-file): without one anyone who can reach it could %s", what, f.addr, tokenEnv, risk)
	}
	b := make([]byte, 16)
	rand.Read(b) // crypto/rand: never fails
	return hex.EncodeToString(b), true, nil
}

// loopback reports whether addr (host:port) listens on a loopback address
// only: 127.0.0.0/8, ::1 or localhost; not an empty host or 0.0.0.0.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
