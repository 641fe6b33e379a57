package netguard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// failingListener fails its first n accepts with err, then accepts from
// the real listener.
type failingListener struct {
	net.Listener
	mu  sync.Mutex
	n   int
	err error
}

func (f *failingListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return nil, f.err
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

func loopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func half() float64 { return 0.5 }

// An accept that fails for want of descriptors is retried with a growing
// delay, counted, and the listener goes on to accept once they are back.
func TestAcceptRetriesTemporaryErrors(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	inner := &failingListener{Listener: loopback(t), n: 4, err: emfile}
	var mu sync.Mutex
	var delays []time.Duration
	l := Wrap(inner, Limits{}, Events{AcceptError: func(err error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(err, syscall.EMFILE) {
			t.Errorf("reported %v, want EMFILE", err)
		}
		delays = append(delays, d)
	}}, half)
	go func() {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after EMFILE: %v (the listener must survive it)", err)
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}
	if fmt.Sprint(delays) != fmt.Sprint(want) {
		t.Fatalf("retry delays %v, want %v", delays, want)
	}
}

// A failed listener (not a temporary state) ends Accept; Close ends a
// retry wait at once.
func TestAcceptEndsOnPermanentErrorAndClose(t *testing.T) {
	perm := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EINVAL)}
	l := Wrap(&failingListener{Listener: loopback(t), n: 1, err: perm}, Limits{}, Events{}, half)
	if _, err := l.Accept(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Accept = %v, want the EINVAL", err)
	}
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	l = Wrap(&failingListener{Listener: loopback(t), n: 1 << 30, err: emfile}, Limits{}, Events{}, half)
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	time.Sleep(50 * time.Millisecond)
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Accept still retrying 2 s after Close")
	}
}

func TestTemporary(t *testing.T) {
	wrap := func(e syscall.Errno) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{wrap(syscall.EMFILE), true},
		{wrap(syscall.ENFILE), true},
		{wrap(syscall.ENOMEM), true},
		{wrap(syscall.ENOBUFS), true},
		{wrap(syscall.ECONNABORTED), true},
		{wrap(syscall.EINVAL), false},
		{wrap(syscall.EBADF), false},
		{net.ErrClosed, false},
		{io.EOF, false},
	} {
		if got := Temporary(c.err); got != c.want {
			t.Errorf("Temporary(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refusedFrom dials addr from src and tells whether the server closed the
// connection within d. A refusal can come so fast that the client's connect
// itself sees the reset: that is a refusal too.
func refusedFrom(t *testing.T, src, addr string, d time.Duration) bool {
	t.Helper()
	dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	c, err := dl.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return closedByServer(c, d)
}

// closedByServer tells whether c was closed by the other side within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// Connections over the per-address bound are closed at once while other
// addresses still get in; over the total bound everyone is refused; a
// closed connection frees its place.
func TestLimitsRefuseOverTheBounds(t *testing.T) {
	inner := loopback(t)
	var mu sync.Mutex
	refused := map[string]int{}
	var opened []int
	l := Wrap(inner, Limits{MaxConns: 5, MaxConnsPerAddr: 3}, Events{
		Refused: func(r string) { mu.Lock(); refused[r]++; mu.Unlock() },
		Open:    func(n int) { mu.Lock(); opened = append(opened, n); mu.Unlock() },
	}, half)
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	addr := inner.Addr().String()
	take := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: not accepted", what)
			return nil
		}
	}
	var server []net.Conn
	for i := range 3 {
		dialFrom(t, "127.0.0.2", addr)
		server = append(server, take(fmt.Sprintf("127.0.0.2 #%d", i)))
	}
	if !refusedFrom(t, "127.0.0.2", addr, 2*time.Second) {
		t.Fatal("a 4th connection from 127.0.0.2 (bound 3 per address) was not closed")
	}
	for i := range 2 {
		dialFrom(t, "127.0.0.3", addr)
		server = append(server, take(fmt.Sprintf("127.0.0.3 #%d", i)))
	}
	if !refusedFrom(t, "127.0.0.4", addr, 2*time.Second) {
		t.Fatal("a 6th connection (bound 5 in total) was not closed")
	}
	if n := l.Open(); n != 5 {
		t.Fatalf("Open = %d, want 5", n)
	}
	server[0].Close()
	server[0].Close() // a second Close frees nothing more
	again := dialFrom(t, "127.0.0.2", addr)
	server = append(server, take("127.0.0.2 after one closed"))
	if closedByServer(again, 100*time.Millisecond) {
		t.Fatal("the connection that took the freed place was closed")
	}
	if n := l.Open(); n != 5 {
		t.Fatalf("Open = %d after one closed (twice) and one more accepted, want 5", n)
	}
	for _, c := range server {
		c.Close()
	}
	if n := l.Open(); n != 0 {
		t.Fatalf("Open after closing all = %d, want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if refused[RefusedPerAddr] != 1 || refused[RefusedTotal] != 1 {
		t.Fatalf("refusals %v, want one per_address and one total", refused)
	}
	if opened[len(opened)-1] != 0 {
		t.Fatalf("last reported open %d, want 0", opened[len(opened)-1])
	}
}

func TestFitDescriptors(t *testing.T) {
	http, api := Limits{MaxConns: 1024, MaxConnsPerAddr: 256}, Limits{MaxConns: 256, MaxConnsPerAddr: 64}
	if FitDescriptors(1<<20, 256, &http, &api) {
		t.Fatal("scaled under a large limit")
	}
	if !FitDescriptors(1024, 256, &http, &api) {
		t.Fatal("not scaled under a 1,024 limit")
	}
	if got := fmt.Sprint(http, api); got != "{614 256} {153 64}" {
		t.Fatalf("scaled to %s, want {614 256} {153 64}", got)
	}
	if http.MaxConns+api.MaxConns > 1024-256 {
		t.Fatalf("%d + %d over the room", http.MaxConns, api.MaxConns)
	}
	tiny := Limits{MaxConns: 100, MaxConnsPerAddr: 50}
	FitDescriptors(64, 256, &tiny)
	if tiny.MaxConns < 1 || tiny.MaxConnsPerAddr > tiny.MaxConns {
		t.Fatalf("under a limit below the reserve: %+v", tiny)
	}
}

func TestBodyBudget(t *testing.T) {
	b := NewBodyBudget(100 << 10)
	body, release, err := b.Read(strings.NewReader(strings.Repeat("x", 40<<10)), -1, 64<<10)
	if err != nil || len(body) != 40<<10 {
		t.Fatalf("Read = %d bytes, %v", len(body), err)
	}
	if in := b.InUse(); in < 40<<10 || in > 64<<10+1 {
		t.Fatalf("InUse %d while a 40 KiB body is held", in)
	}
	// A second body does not fit beside the first.
	if _, _, err := b.Read(strings.NewReader(strings.Repeat("y", 64<<10)), 64<<10, 64<<10); !errors.Is(err, ErrBodyBudget) {
		t.Fatalf("second body: %v, want ErrBodyBudget", err)
	}
	if in := b.InUse(); in > 64<<10+1 {
		t.Fatalf("the refused body left %d bytes charged", in)
	}
	release()
	if in := b.InUse(); in != 0 {
		t.Fatalf("InUse %d after release", in)
	}
	var tooBig *BodyTooLargeError
	if _, _, err := b.Read(strings.NewReader(strings.Repeat("z", 64<<10+1)), 100, 64<<10); !errors.As(err, &tooBig) || tooBig.Limit != 64<<10 {
		t.Fatalf("a body one byte over: %v", err)
	}
	if body, release, err := b.Read(strings.NewReader(strings.Repeat("z", 64<<10)), -1, 64<<10); err != nil || len(body) != 64<<10 {
		t.Fatalf("a body at the limit: %d, %v", len(body), err)
	} else {
		release()
	}
	if in := b.InUse(); in != 0 {
		t.Fatalf("InUse %d after errors and releases", in)
	}
	// A small body announced truthfully is one buffer of its size.
	body, release, err = b.Read(strings.NewReader("hello"), 5, 64<<10)
	if err != nil || string(body) != "hello" || cap(body) != 6 || b.InUse() != 6 {
		t.Fatalf("a 5-byte body: %q cap %d charged %d, %v", body, cap(body), b.InUse(), err)
	}
	release()
	// An announcement that lies low still reads the whole body.
	body, release, err = b.Read(strings.NewReader(strings.Repeat("l", 3000)), 5, 64<<10)
	if err != nil || len(body) != 3000 {
		t.Fatalf("a body longer than announced: %d, %v", len(body), err)
	}
	release()
}

// A client that announced a large body and sent a little costs what it
// sent, not what it announced.
func TestBodyBudgetChargesWhatArrived(t *testing.T) {
	b := NewBodyBudget(0)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Read(pr, 8<<20, 8<<20)
	}()
	pw.Write(bytes.Repeat([]byte("a"), 1000))
	time.Sleep(20 * time.Millisecond)
	if in := b.InUse(); in > bodyChunk {
		t.Fatalf("%d bytes charged for 1,000 arrived", in)
	}
	pw.CloseWithError(errors.New("client went away"))
	<-done
	if in := b.InUse(); in != 0 {
		t.Fatalf("InUse %d after a failed read", in)
	}
}
