package boltsafe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// newFile writes a bbolt file of a few hundred pages and returns its path.
func newFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for i := range 20000 {
			if err := b.Put(fmt.Appendf(nil, "key-%06d", i), []byte(strings.Repeat("v", 64))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVerify(t *testing.T) {
	ctx := context.Background()
	t.Run("whole file passes", func(t *testing.T) {
		if err := Verify(ctx, newFile(t), Options{Full: true, BytesPerSecond: 1 << 30}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing file passes", func(t *testing.T) {
		if err := Verify(ctx, filepath.Join(t.TempDir(), "none.db"), Options{Full: true}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("truncated inside its pages", func(t *testing.T) {
		path := newFile(t)
		if err := os.Truncate(path, 5*4096+100); err != nil {
			t.Fatal(err)
		}
		err := Verify(ctx, path, Options{})
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("got %v, want a truncation naming %s", err, path)
		}
	})
	t.Run("not a bbolt file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "junk.db")
		if err := os.WriteFile(path, []byte(strings.Repeat("junk", 4096)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Verify(ctx, path, Options{}); !errors.Is(err, ErrDamaged) {
			t.Fatalf("got %v, want ErrDamaged", err)
		}
	})
	t.Run("scrambled pages fail the full check only", func(t *testing.T) {
		path := newFile(t)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// Overwrite page headers in the middle of the file: pages that no
		// longer identify as themselves.
		for p := 20; p < 40; p++ {
			copy(data[p*4096:], []byte{0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef, 0x77, 0x77})
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Verify(ctx, path, Options{}); err != nil {
			t.Fatalf("size check: %v", err)
		}
		if err := Verify(ctx, path, Options{Full: true}); !errors.Is(err, ErrDamaged) {
			t.Fatalf("full check: got %v, want ErrDamaged", err)
		}
	})
}

func TestGuardReturnsTheFunctionsOwnError(t *testing.T) {
	want := errors.New("plain")
	if err := Guard("some.db", func() error { return want }); err != want {
		t.Fatalf("got %v, want the function's own error", err)
	}
}

// A page bbolt cannot read makes bbolt panic: the file is damaged.
func TestGuardCallsAPanicInBboltDamage(t *testing.T) {
	path := newFile(t)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Leaf pages of the bucket's tree: neither branch nor leaf any more.
	if _, err := f.WriteAt([]byte(strings.Repeat("\xff", 40*4096)), 100*4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	err = Guard(path, func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("b")).ForEach(func(k, v []byte) error { return nil })
		})
	})
	if !errors.Is(err, ErrDamaged) || errors.Is(err, ErrPanic) || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want ErrDamaged naming %s", err, path)
	}
	t.Log(err)
}

// A panic in the caller's own code under Guard is a defect of that code:
// it must not be reported as a damaged file, which would have the node
// rebuild a sound one and meet the same panic again.
func TestGuardCallsAPanicInOurCodeADefect(t *testing.T) {
	var nilMap map[string]int
	var nilRecord *struct{ seq uint64 }
	for name, fn := range map[string]func() error{
		"panic":   func() error { panic("apply: unknown command body") },
		"nil map": func() error { nilMap["x"] = 1; return nil },
		"nil dereference": func() error {
			nilRecord.seq++
			return nil
		},
	} {
		err := Guard("state.db", fn)
		if !errors.Is(err, ErrPanic) || errors.Is(err, ErrDamaged) {
			t.Fatalf("%s: got %v, want ErrPanic and not ErrDamaged", name, err)
		}
		if !strings.Contains(err.Error(), "state.db") || !strings.Contains(err.Error(), "boltsafe.TestGuardCallsAPanicInOurCodeADefect") {
			t.Fatalf("%s: got %q, want the file and the panicking function named", name, err)
		}
		t.Log(err)
	}
}

// Reading a truncated file without Verify first (a page mapped past the end
// of the file is a fault, a page read as garbage a panic): under Guard it is
// an error, and the test binary lives on.
func TestGuardTurnsFaultsIntoErrors(t *testing.T) {
	path := newFile(t)
	if err := os.Truncate(path, 5*4096+100); err != nil {
		t.Fatal(err)
	}
	err := Guard(path, func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, InitialMmapSize: 8 << 20})
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("b")).ForEach(func(k, v []byte) error { return nil })
		})
	})
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("got %v, want ErrDamaged", err)
	}
	t.Log(err)
}
