//go:build unix

package testcluster

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
)

// Links routes every node-to-node connection (raft and control API)
// through a loopback proxy the test can cut, without network namespaces:
// each node binds its real addresses, while the member list every node
// reads names the proxies. Test clients keep using Node.RaftAddr/APIAddr,
// which reach the node directly and are never cut.
type Links struct {
	mu      sync.Mutex
	proxies []*linkProxy
}

// InsertLinks rewrites the node configs of c (before any node starts) so
// peers dial each other through cuttable proxies.
func (c *Cluster) InsertLinks() (*Links, error) {
	l := &Links{}
	replace := map[string]string{}
	for _, n := range c.Nodes {
		for _, field := range []struct{ key, addr string }{{"raft_addr", n.RaftAddr}, {"api_addr", n.APIAddr}} {
			p, err := newLinkProxy(field.addr)
			if err != nil {
				l.Close()
				return nil, err
			}
			l.proxies = append(l.proxies, p)
			replace[fmt.Sprintf("%s: %q", field.key, field.addr)] = fmt.Sprintf("%s: %q", field.key, p.addr())
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
		p.setCut(cut)
	}
}

// Close stops the proxies.
func (l *Links) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		p.close()
	}
}

type linkProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

func newLinkProxy(target string) (*linkProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("link proxy for %s: %w", target, err)
	}
	p := &linkProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.loop()
	return p, nil
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) loop() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

func (p *linkProxy) track(cs ...net.Conn) bool {
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

func (p *linkProxy) serve(in net.Conn) {
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
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	in.Close()
	out.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

func (p *linkProxy) setCut(cut bool) {
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

func (p *linkProxy) close() {
	p.setCut(true)
	p.ln.Close()
}
