package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a server and brings the faults of a
// network between them: it can drop every connection at once (mid-command),
// throttle the bytes it forwards (a slow link), and hold them (a half-open
// link: connections stay open, nothing crosses).
type Proxy struct {
	ln net.Listener

	// rate is the bytes a second each direction of each connection may
	// carry; 0 means unlimited.
	rate atomic.Int64

	mu     sync.Mutex
	target string // where new connections go (Retarget)
	conns  map[net.Conn]struct{}
	held   chan struct{} // non-nil while held; closed by Release
	wg     sync.WaitGroup
}

// StartProxy starts a proxy to target on a free loopback port, stopped when
// tb ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	Slow(tb)
	p, err := NewProxy(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// NewProxy starts a proxy to target on a free loopback port outside a test
// (chaos, the benchmark); Close it when done.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Close stops accepting, releases a hold, drops every connection and waits
// for the proxy's goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Release()
	p.DropAll()
	p.wg.Wait()
}

// Addr returns the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Throttle limits each direction of each connection to bytesPerSecond
// (0: unlimited), from the next chunk forwarded on.
func (p *Proxy) Throttle(bytesPerSecond int64) { p.rate.Store(max(bytesPerSecond, 0)) }

// Hold stops forwarding in both directions, keeping every connection open,
// until Release: what a half-open link or a stalled router does.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Release ends a Hold; what was held is forwarded.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// Retarget sends new connections to target and drops the open ones (as a
// client reconnecting after a failover would find the new primary).
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.DropAll()
}

// DropAll closes every open connection, both sides, and returns how many
// client connections it dropped. New connections are still accepted.
func (p *Proxy) DropAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2
	clear(p.conns)
	return n
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		server, err := net.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client] = struct{}{}
		p.conns[server] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

// hold returns the channel a held proxy's pipes wait on, or nil.
func (p *Proxy) hold() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// chunk is the most a pipe forwards at once, so that a throttle paces
// within a large reply.
const chunk = 4 << 10

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, chunk)
	// next is when the pipe may send again under a throttle: each chunk
	// moves it by the chunk's time at the rate, so the long-run rate holds
	// whatever the sleeps' granularity.
	var next time.Time
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if h := p.hold(); h != nil {
				<-h
			}
			if r := p.rate.Load(); r > 0 {
				now := time.Now()
				if next.Before(now) {
					next = now
				}
				next = next.Add(time.Duration(int64(n) * int64(time.Second) / r))
				time.Sleep(time.Until(next))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
