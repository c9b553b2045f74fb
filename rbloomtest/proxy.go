package rbloomtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 that forwards every connection to one
// target and injects faults on command: it drops requests or replies,
// delays replies and resets connections, deterministically or at random.
// It knows nothing of RESP: it sees chunks, what one read from a socket
// returns. A small command or reply on loopback is one chunk, but a big
// one, or a pipeline, may be several, and several small ones may arrive
// together.
//
// The fault that matters most is DropReplies: the server has run the
// command but the client never sees the reply, which is exactly when a
// client that retries on network errors (go-redis does, by default) runs a
// command twice.
//
// A Proxy is created by NewProxy and stopped when its test ends. Its
// methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // canceled when the proxy stops
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	links       map[*link]struct{} // open connections
	dropReqs    int                // armed one-shot faults
	dropReplies int
	delay       time.Duration
	rng         *rand.Rand // nil: no random faults
	prob        float64
	stats       ProxyStats
}

// ProxyStats counts what a Proxy did since it started.
type ProxyStats struct {
	Conns           int // client connections accepted
	DroppedRequests int // client chunks not forwarded: the server never saw them
	DroppedReplies  int // server chunks not delivered: the server had run the command
	DelayedReplies  int // server chunks delivered late
	Resets          int // connections reset by Reset
}

// Faults returns the number of faults injected: dropped chunks and resets
// (each ends a connection), not delays.
func (s ProxyStats) Faults() int {
	return s.DroppedRequests + s.DroppedReplies + s.Resets
}

// link is one proxied connection: client <-> proxy <-> server.
type link struct {
	client, server *net.TCPConn
	once           sync.Once
	closed         chan struct{} // closed by reset, to end a delay early
}

// reset closes both sides with a TCP RST (SO_LINGER 0) rather than a FIN,
// so that the peers see a reset connection at once.
func (l *link) reset() {
	l.once.Do(func() {
		close(l.closed)
		l.client.SetLinger(0)
		l.server.SetLinger(0)
		l.client.Close()
		l.server.Close()
	})
}

// NewProxy starts a proxy on 127.0.0.1 and a free port that forwards every
// connection to target (host:port), with no faults until told. It is
// stopped when the test ends: the listener and every connection are closed
// and its goroutines have returned.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("rbloomtest: NewProxy: %v", err)
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Go(p.accept)
	t.Cleanup(p.stop)
	return p
}

// Addr returns the address clients should connect to ("127.0.0.1:port").
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// DropRequests arms n faults: each of the next n chunks a client sends, on
// any connection, is not forwarded, and that connection is reset. The
// server never sees the command: a retry is safe.
func (p *Proxy) DropRequests(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropReqs += n
}

// DropReplies arms n faults: each of the next n chunks the server sends, on
// any connection, is not delivered, and that connection is reset. The
// server has run the command; the client gets a network error instead of
// the reply.
//
// go-redis starts every new connection with a handshake (HELLO and more)
// and reads its replies before sending the first command: make one call
// first, so that the chunk dropped is the reply to the command meant.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropReplies += n
}

// DelayReplies holds every chunk from the server for d before delivering
// it, from now on; 0 stops delaying. A reply that arrives in two chunks is
// delayed twice. Requests are not delayed.
func (p *Proxy) DelayReplies(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Random makes every chunk, in either direction, a fault with probability
// prob, drawn from a generator seeded with seed: a dropped request or a
// dropped reply, as with DropRequests and DropReplies. prob 0 turns random
// faults off. Given the same seed and the same sequence of chunks (one
// client making one call at a time) the same chunks are dropped; with
// concurrent connections the order of draws, and so the faults, vary.
// It panics if prob is not in [0, 1].
func (p *Proxy) Random(seed uint64, prob float64) {
	if !(prob >= 0 && prob <= 1) {
		panic(fmt.Sprintf("rbloomtest: Proxy.Random: prob %v not in [0, 1]", prob))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rng, p.prob = nil, prob
	if prob > 0 {
		p.rng = rand.New(rand.NewPCG(seed, 0))
	}
}

// Reset resets every open connection now, and returns how many there were.
// Clients see the reset on their next read or write; new connections work.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.stats.Resets += len(links)
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
	return len(links)
}

// Stats returns the counters so far.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Proxy) stop() {
	p.cancel()
	p.ln.Close()
	p.mu.Lock()
	for l := range p.links {
		l.reset()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed by stop
		}
		p.mu.Lock()
		p.stats.Conns++
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(c.(*net.TCPConn)) })
	}
}

// serve dials the target for one client and pumps both ways until either
// side closes or a fault resets the link.
func (p *Proxy) serve(client *net.TCPConn) {
	d := net.Dialer{Timeout: 5 * time.Second}
	s, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	l := &link{client: client, server: s.(*net.TCPConn), closed: make(chan struct{})}
	p.mu.Lock()
	select {
	case <-p.ctx.Done(): // stop has already reset the links it knew
		p.mu.Unlock()
		l.reset()
		return
	default:
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var both sync.WaitGroup
	both.Go(func() { p.pump(l, l.client, l.server, false) })
	both.Go(func() { p.pump(l, l.server, l.client, true) })
	both.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pump copies chunks from src to dst, applying faults to each. Either
// direction ending ends the link: a Redis connection is useless half-open.
func (p *Proxy) pump(l *link, src, dst *net.TCPConn, reply bool) {
	defer l.reset()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			drop, delay := p.decide(reply)
			if drop {
				return
			}
			if delay > 0 && !l.sleep(delay) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// decide says what happens to one chunk: dropped (armed faults first, then
// random ones) or delayed.
func (p *Proxy) decide(reply bool) (drop bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	armed, dropped := &p.dropReqs, &p.stats.DroppedRequests
	if reply {
		armed, dropped = &p.dropReplies, &p.stats.DroppedReplies
	}
	switch {
	case *armed > 0:
		*armed--
		drop = true
	case p.rng != nil && p.rng.Float64() < p.prob:
		drop = true
	}
	if drop {
		*dropped++
		return true, 0
	}
	if reply && p.delay > 0 {
		p.stats.DelayedReplies++
		return false, p.delay
	}
	return false, 0
}

// sleep waits for d, and reports false if the link was reset meanwhile
// (stop resets every link).
func (l *link) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.closed:
		return false
	}
}
