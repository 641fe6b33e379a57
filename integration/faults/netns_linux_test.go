//go:build linux

package faults

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestNetnsCutsAndHeals checks the network layer on its own: hosts reach
// each other over the bridge, a cut link drops packets one way only, loss
// is installed and removed, no namespace has a route out,
// and Close leaves no namespace behind.
func TestNetnsCutsAndHeals(t *testing.T) {
	if ok, why := netnsAvailable(); !ok {
		t.Skip("network namespaces unavailable: " + why)
	}
	n, err := newNetns([]string{"node-a", "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })

	// An echo server on node-a, listening inside its namespace.
	l, err := n.Listen("node-a", "tcp", n.Host("node-a")+":9000")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	reach := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		c, err := n.Dial(ctx, "tcp", n.Host("node-a")+":9000")
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(400 * time.Millisecond))
		if _, err := c.Write([]byte("x")); err != nil {
			return false
		}
		buf := make([]byte, 1)
		_, err = io.ReadFull(c, buf)
		return err == nil
	}
	if !reach() {
		t.Fatal("client cannot reach node-a over the bridge")
	}
	// Nothing may leave the machine: no namespace of ours has a default
	// route. (Dialing from the root namespace would itself send packets out
	// through the host's default route, so that is not how it is checked.)
	for _, id := range append(append([]string{}, n.order...), "br") {
		out, err := exec.Command("ip", "-n", n.ns(id), "route", "show", "default").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Fatalf("namespace %s: default route %q (%v)", n.ns(id), out, err)
		}
	}
	steps := []struct {
		name string
		cut  []link
		loss float64
		want bool
	}{
		{"client→node-a cut", []link{{hostClient, "node-a"}}, 0, false},
		{"node-a→client cut (replies)", []link{{"node-a", hostClient}}, 0, false},
		{"unrelated link cut", []link{{"node-b", "node-a"}}, 0, true},
		{"healed", nil, 0, true},
		{"loss between nodes only", nil, 0.5, true},
		{"healed again", nil, 0, true},
	}
	for _, s := range steps {
		if err := n.Apply(s.cut, s.loss); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := reach(); got != s.want {
			t.Fatalf("%s: reachable = %v, want %v", s.name, got, s.want)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(n.order, "br") {
		if _, err := os.Stat("/var/run/netns/" + n.ns(id)); err == nil {
			t.Fatalf("namespace %s left behind", n.ns(id))
		}
	}
}
