//go:build unix

package testcluster

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// Links routes every node-to-node connection (raft and control API)
// through a loopback proxy the test can cut, without network namespaces:
// each node binds its real addresses, while the member list every node
// reads names the proxies. Test clients keep using Node.RaftAddr/APIAddr,
// which reach the node directly and are never cut.
type Links struct {
	mu      sync.Mutex
	proxies []*Proxy
}

// InsertLinks rewrites the node configs of c (before any node starts) so
// peers dial each other through cuttable proxies.
func (c *Cluster) InsertLinks() (*Links, error) {
	l := &Links{}
	replace := map[string]string{}
	for _, n := range c.Nodes {
		for _, field := range []struct{ key, addr string }{{"raft_addr", n.RaftAddr}, {"api_addr", n.APIAddr}} {
			p, err := NewProxy(field.addr)
			if err != nil {
				l.Close()
				return nil, err
			}
			l.proxies = append(l.proxies, p)
			replace[fmt.Sprintf("%s: %q", field.key, field.addr)] = fmt.Sprintf("%s: %q", field.key, p.Addr())
		}
	}
	for _, n := range c.Nodes {
		data, err := os.ReadFile(n.Config)
		if err != nil {
			l.Close()
			return nil, err
		}
		text := string(data)
		for from, to := range replace {
			text = strings.ReplaceAll(text, from, to)
		}
		text = strings.Replace(text, "cluster:\n", fmt.Sprintf("cluster:\n  raft_bind: %q\n", n.RaftAddr), 1)
		text += fmt.Sprintf("api:\n  listen: %q\n", n.APIAddr)
		if err := os.WriteFile(n.Config, []byte(text), 0o644); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// Cut drops every node-to-node connection and refuses new ones (cut =
// true), or lets them through again.
func (l *Links) Cut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		p.Cut(cut)
	}
}

// CutTo drops the connections to target (a node's RaftAddr or APIAddr)
// and refuses new ones (cut = true), or lets them through again; the
// node's own connections to its peers go on.
func (l *Links) CutTo(target string, cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		if p.target == target {
			p.Cut(cut)
		}
	}
}

// Close stops the proxies.
func (l *Links) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		p.Close()
	}
}

// Proxy is a loopback TCP proxy a test can cut: cutting closes every
// connection through it at once (the peer sees the link drop, as when a
// cable is pulled or the far process dies) and refuses new ones until it
// is let through again.
type Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	// latency holds what the target sends back this long before it is
	// passed on (SetLatency).
	latency time.Duration
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("link proxy for %s: %w", target, err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.loop()
	return p, nil
}

// SetLatency holds what the target answers for d before passing it on,
// in order, on connections made from now on: a far link's round trip.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) loop() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) serve(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	if !p.track(in, out) {
		in.Close()
		out.Close()
		return
	}
	p.mu.Lock()
	latency := p.latency
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(out, in)
		done <- struct{}{}
	}()
	go func() {
		copyLate(in, out, latency)
		done <- struct{}{}
	}()
	<-done
	in.Close()
	out.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// copyLate copies src to dst, each read written latency after it was
// read, in order, until either side fails.
func copyLate(dst, src net.Conn, latency time.Duration) {
	if latency <= 0 {
		_, _ = io.Copy(dst, src)
		return
	}
	type chunk struct {
		due  time.Time
		data []byte
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now().Add(latency), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.data); err != nil {
			src.Close()
			for range chunks {
			}
			return
		}
	}
}

// Cut drops every connection and refuses new ones (cut = true), or lets
// them through again.
func (p *Proxy) Cut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]struct{}{}
	}
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() {
	p.Cut(true)
	p.ln.Close()
}
