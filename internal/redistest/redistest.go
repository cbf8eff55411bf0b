// Package redistest runs real redis-server processes for tests.
//
// A package's tests share one server started by Main from TestMain, each test
// in its own queue (Queue), so they can run in parallel; a fault test starts a
// server of its own with Start and may kill, restart or flush it. Tests never
// touch a server they did not start.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/connect"
)

// quietRedisLogs routes go-redis's process-wide logger (its pool's
// "failed to dial" lines, as fault tests break servers on purpose) through
// slog at debug level, shown only with REDMAP_TEST_REDIS_LOGS=1: test
// output carries what the tests say, not a library's retries.
func quietRedisLogs() {
	level := slog.LevelInfo
	if os.Getenv("REDMAP_TEST_REDIS_LOGS") == "1" {
		level = slog.LevelDebug
	}
	connect.RouteLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

// Server is a redis-server process on a loopback port.
type Server struct {
	Port int
	dir  string
	args []string
	tls  *tls.Config // the client side of a TLS-only server (StartTLS)
	// busPort: a Cluster node, whose cluster bus listens on Port+10000
	busPort bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

var (
	shared        *Server
	sharedCluster *Cluster
)

// ClusterEnv names the variable that, set to "cluster", makes Run start a 3-master Cluster that
// harness.Setup gives every test (make test-cluster); the shared server
// still serves the tests that ask for one server.
const ClusterEnv = "REDMAP_TEST_REDIS"

// ShardsEnv names the variable that, set to a number, makes harness.Env's
// managers spread their tasks over that many shards of the queue
// (manager.Options.Shards), unless a test sets its own: the suites then run
// on a sharded queue (make test-cluster).
const ShardsEnv = "REDMAP_TEST_SHARDS"

// Shards returns the shard count ShardsEnv asks for, or 0.
func Shards() int {
	n, _ := strconv.Atoi(os.Getenv(ShardsEnv))
	return max(n, 0)
}

// SharedCluster returns the Cluster Run started, or nil.
func SharedCluster() *Cluster { return sharedCluster }

// missing is the one line printed when there is no redis-server to run.
const missing = "redistest: redis-server not found in PATH; install it (Debian: apt-get install -y redis-server) or run `make test`, which installs it when it can"

// Main starts the package's shared server, points REDIS_URL at it (for the
// package's examples), runs the tests, stops the server and exits. Call it
// from TestMain.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit, for a TestMain with its own clean-up: it
// returns the tests' exit code.
func Run(m *testing.M) int {
	quietRedisLogs()
	s, err := start(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared = s
	// Examples connect through REDIS_URL, as a user's program would; in
	// tests it is this server, never one the tests did not start.
	os.Setenv("REDIS_URL", s.URL())
	defer os.RemoveAll(s.dir)
	defer s.stop()
	if os.Getenv(ClusterEnv) == "cluster" {
		cl, err := startCluster(3, false)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cl.Stop()
		sharedCluster = cl
		os.Setenv("REDIS_URL", cl.URL())
		fmt.Fprintln(os.Stderr, "redistest: the tests' shared Redis is a 3-master Cluster:", cl.URL())
	}
	if n := Shards(); n > 0 {
		fmt.Fprintf(os.Stderr, "redistest: the tests' managers spread their queues over %d shards\n", n)
	}
	return m.Run()
}

// StartServer starts a server outside a test (for the benchmark); Stop it
// when done. Extra arguments go to redis-server.
func StartServer(args ...string) (*Server, error) { return start(args) }

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.stop()
	os.RemoveAll(s.dir)
}

// Shared returns the server started by Main.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	if shared == nil {
		tb.Fatal("redistest: no shared server: call redistest.Main from TestMain")
	}
	return shared
}

// Addr returns the address of the server started by Main, for examples,
// which have no testing.TB; "" if there is none.
func Addr() string {
	if shared == nil {
		return ""
	}
	return shared.Addr()
}

// Start starts a server for tb alone, stopped when tb ends. Extra arguments go
// to redis-server (for example "--maxmemory", "1mb").
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := start(args)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.stop()
		os.RemoveAll(s.dir)
	})
	return s
}

func start(args []string) (*Server, error) { return startAs(&Server{args: args}) }

// startAs starts the server proto describes (its args, TLS, bus port) on a
// free port.
func startAs(proto *Server) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New(missing)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	// A free port can be taken by someone else between our probe and the
	// server's bind, so try a few.
	for range 5 {
		port, err := freePort(proto.busPort)
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, dir: dir, args: proto.args, tls: proto.tls, busPort: proto.busPort}
		if err = s.run(bin); err == nil {
			return s, nil
		}
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "redis*.log"))
	var log []byte
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		log = append(log, b...)
	}
	return nil, fmt.Errorf("redistest: redis-server did not start; its log:\n%s", log)
}

// freePort returns a loopback port nobody listens on; with bus, one below
// 55000 whose port+10000 is free too (a Cluster node's bus port).
func freePort(bus bool) (int, error) {
	if !bus {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for range 100 {
		port := 20000 + rand.IntN(35000)
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free port pair for a Cluster node")
}

// run starts the process and waits until it answers PING.
func (s *Server) run(bin string) error {
	ports := []string{"--port", strconv.Itoa(s.Port)}
	if s.tls != nil {
		ports = []string{"--port", "0", "--tls-port", strconv.Itoa(s.Port)}
	}
	args := append(append(ports,
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.Port)),
	), s.args...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, TLSConfig: s.tls})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c.Ping(context.Background()).Err() == nil {
			s.mu.Lock()
			s.cmd, s.exited = cmd, exited
			s.mu.Unlock()
			return nil
		}
		select {
		case <-exited:
			return errors.New("redistest: redis-server exited")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return errors.New("redistest: redis-server did not answer PING within 10s")
		}
	}
}

// Addr returns "127.0.0.1:<port>".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL returns "redis://127.0.0.1:<port>/0" (for a TLS server, see
// TLS.URL).
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a client of the server, closed when tb ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.tls})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server with SIGKILL and waits for it to exit. Its data is
// gone: it runs with no persistence.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	s.stop()
}

// Restart starts the server again, empty, on the same port.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.stop()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal(missing)
	}
	if err := s.run(bin); err != nil {
		tb.Fatal(err)
	}
}

// FlushAll deletes every key on the server.
func (s *Server) FlushAll(tb testing.TB) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.tls})
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		tb.Fatal(err)
	}
}

func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-exited
	}
}

var (
	queueSeq  atomic.Uint64
	unsafeRun = regexp.MustCompile(`[^A-Za-z0-9_.]+`)
)

// Queue returns a queue name no other test of the process uses, derived from
// the test's name, so tests can share a server and run in parallel.
func Queue(tb testing.TB) string {
	return fmt.Sprintf("%s.%d", unsafeRun.ReplaceAllString(tb.Name(), "_"), queueSeq.Add(1))
}

// Eventually polls cond every 10 ms until it holds, failing tb after
// WaitLimit. It is for conditions no event announces, such as a key's TTL
// running out in Redis.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(WaitLimit(tb))
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitLimit is how long a test waits for something that should happen: 2
// minutes, or half of what is left before the test binary's deadline if
// that is less. A wait is no timing assertion: on a machine busy with other
// work, under -race, what takes 1 s alone may take 20 (make test failed so
// beside two CPU-burning processes, issue 37), so the bound is only there to
// end a test that would otherwise wait for ever.
func WaitLimit(tb testing.TB) time.Duration {
	limit := 2 * time.Minute
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := t.Deadline(); ok {
			limit = min(limit, time.Until(d)/2)
		}
	}
	return limit
}

// DieWithParent makes cmd, a process a test starts (a worker, say), die when
// the test process dies, where the platform allows it.
func DieWithParent(cmd *exec.Cmd) { cmd.SysProcAttr = procAttr() }

// Slow skips tb under go test -short (make test-unit), as harness.Start,
// StartCluster, StartClusterReplicas, StartSentinel and StartProxy do: a
// test that starts processes of its own (workers, a manager, a Cluster,
// Sentinels) or faults the network runs in make test only. Tests on the
// shared server stay in the short set: they are the fast real-Redis tests.
func Slow(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts processes or faults the network: make test runs it")
	}
}

// OwnTopology skips tb on the shared Cluster of make test-cluster when no
// ShardsEnv is set: a test that starts its own Cluster or Sentinel runs
// there exactly as in make test, which has run it. With ShardsEnv it runs,
// its managers then sharded.
func OwnTopology(tb testing.TB) {
	tb.Helper()
	if os.Getenv(ClusterEnv) != "" && Shards() == 0 {
		tb.Skip("starts its own topology, as in make test, which runs it")
	}
}
