package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a server and can drop them all at once,
// as a network fault would, mid-command.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartProxy starts a proxy to target on a free loopback port, stopped when
// tb ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.serve()
	tb.Cleanup(func() {
		ln.Close()
		p.DropAll()
		p.wg.Wait()
	})
	return p
}

// Addr returns the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

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
		server, err := net.Dial("tcp", p.target)
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

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
