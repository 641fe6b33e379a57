package raftnode

import (
	"net"
	"testing"
)

// A view forgets each connection it handed out once raft closes it: a peer
// that redials after every cut must not grow the view for as long as the
// transport lives. Closing the view still closes what is open.
func TestViewForgetsClosedConnections(t *testing.T) {
	s := &tlsStream{accepted: make(chan *trackedConn, 1), closed: make(chan struct{})}
	v := s.newView()
	for range 100 {
		ours, theirs := net.Pipe()
		s.accepted <- &trackedConn{Conn: ours, peer: "node-b", contact: func(string) {}}
		c, err := v.Accept()
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		_ = theirs.Close()
	}
	ours, theirs := net.Pipe()
	defer theirs.Close()
	s.accepted <- &trackedConn{Conn: ours, peer: "node-b", contact: func(string) {}}
	open, err := v.Accept()
	if err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	held := len(v.conns)
	v.mu.Unlock()
	if held != 1 {
		t.Fatalf("the view holds %d connections after 100 closed and 1 open, want 1", held)
	}
	_ = v.Close()
	if _, err := open.Write([]byte("x")); err == nil {
		t.Error("the open connection still writes after the view closed")
	}
	_ = open.Close() // after the view: must not touch its map
}
