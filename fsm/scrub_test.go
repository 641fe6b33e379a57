package fsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
)

// TestScrubFindsDamageWhileRunning: pages overwritten under a running FSM
// (a disk or another process writing where it must not) are found by Scrub,
// which names the file; a healthy state scrubs clean and gives the digest.
func TestScrubFindsDamageWhileRunning(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	for i := range 2000 {
		mustOK(t, f, w.cmd(enqueue(msg(fmt.Sprintf("m-%d", i), "t", "a payload of some length to fill pages"))))
	}
	sum, applied, err := f.Scrub(context.Background(), 0)
	if err != nil {
		t.Fatalf("healthy state: %v", err)
	}
	if sum != digest(t, f) || applied != f.Meta().AppliedIndex {
		t.Fatalf("scrub says %s at %d, the FSM %s at %d", sum, applied, digest(t, f), f.Meta().AppliedIndex)
	}
	damagePages(t, f.Path())
	_, _, err = f.Scrub(context.Background(), 0)
	if !errors.Is(err, ErrDamagedState) {
		t.Fatalf("damaged state: got %v, want ErrDamagedState", err)
	}
	t.Log(err)
}

// TestDamageFoundByAReadStopsAppliesUntilARestore: a reader that reaches a
// damaged page gets ErrDamagedState instead of a panic, the FSM refuses
// entries (the node must rebuild), and a verified restore replaces the
// file and lets it apply again.
func TestDamageFoundByAReadStopsAppliesUntilARestore(t *testing.T) {
	src := openTestFSM(t)
	sw := newLogWriter(t)
	mustOK(t, src, sw.cmd(enqueue(msg("healthy", "t", "x"))))
	var good bytes.Buffer
	if _, err := src.Backup(&good); err != nil {
		t.Fatal(err)
	}

	f := openTestFSM(t)
	w := newLogWriter(t)
	for i := range 2000 {
		mustOK(t, f, w.cmd(enqueue(msg(fmt.Sprintf("m-%d", i), "t", "a payload of some length to fill pages"))))
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	damagePages(t, f.Path())
	if _, err := f.Digest(); !errors.Is(err, ErrDamagedState) {
		t.Fatalf("digest of a damaged state: %v, want ErrDamagedState", err)
	}
	if !errors.Is(f.Err(), ErrDamagedState) {
		t.Fatalf("FSM error %v, want ErrDamagedState", f.Err())
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(good.Bytes()))); err != nil {
		t.Fatalf("restore over a damaged state: %v", err)
	}
	if err := f.Err(); err != nil {
		t.Fatalf("after the restore: %v", err)
	}
	if has, _ := f.SFHas("healthy"); !has {
		t.Fatal("restored state lacks its message")
	}
}

func damagePages(t *testing.T, path string) {
	t.Helper()
	file, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for p := int64(8); p < 40; p++ {
		if _, err := file.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef, 0x77, 0x77}, p*4096); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScrubWhileApplyingFindsNoDamage: bbolt's consistency check compares
// the pages its transaction reaches with the database's free list, which
// commits change as they free and allocate pages; a scrub running beside
// applies (the normal case on every node) must neither report a healthy
// state damaged nor read the free list while a commit writes it.
func TestScrubWhileApplyingFindsNoDamage(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	payload := string(bytes.Repeat([]byte("p"), 900))
	for i := range 3000 {
		mustOK(t, f, w.cmd(enqueue(msg(fmt.Sprintf("m-%d", i), "t", payload))))
	}
	ctx, cancel := context.WithCancel(context.Background())
	applied := make(chan error, 1)
	go func() {
		// Each entry enqueues one message and delivers an older one:
		// every commit frees pages and allocates others.
		for i := 3000; ctx.Err() == nil; i++ {
			if r := applyOne(t, f, w.cmd(enqueue(msg(fmt.Sprintf("m-%d", i), "t", payload)))); r.Err != nil {
				applied <- r.Err
				return
			}
			if r := applyOne(t, f, w.cmd(delivered(fmt.Sprintf("m-%d", i-3000)))); r.Err != nil {
				applied <- r.Err
				return
			}
		}
		applied <- nil
	}()
	for range 40 {
		if _, _, err := f.Scrub(context.Background(), 0); err != nil {
			cancel()
			<-applied
			t.Fatalf("a healthy state scrubbed beside applies: %v", err)
		}
	}
	cancel()
	if err := <-applied; err != nil {
		t.Fatalf("apply beside the scrubs: %v", err)
	}
}
