package boltsafe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrDamaged marks a file whose content cannot be trusted: truncated, with
// pages that fail bbolt's consistency check, or one bbolt panicked or
// faulted on.
var ErrDamaged = errors.New("damaged bbolt file")

// Options say how much Verify does beyond the size check.
type Options struct {
	// Full runs bbolt's consistency check (every reachable page, every
	// bucket's keys in order, the freelist) and reads every byte of the
	// file, so an unreadable sector is an I/O error here, not a fault later.
	Full bool
	// BytesPerSecond bounds the full read (0: unbounded), so a scrub of a
	// large file does not take the disk or a core from the workload.
	BytesPerSecond int64
	// MaxErrors is how many consistency errors are collected before the
	// check stops (default 10).
	MaxErrors int
	// AfterCheck, when set, is called as soon as the consistency check
	// ends, before the read of the file. A caller checking a database it
	// writes holds its commits off until then: bbolt's check compares the
	// pages the transaction reaches with the database's free list, the
	// live one, which a commit changes (beside a commit it reports pages
	// freed after the transaction began as "reachable freed", and reads
	// the list while the commit writes it, which kills the process). It
	// is also where the caller hands back the pages the check read
	// through its map (package mapped), which its transaction still
	// holds; not while the check runs: the check visits pages more than
	// once, and releasing them under it slowed a check by a third. A
	// check through Verify's own map needs neither: Verify opens the
	// file read-only and closes it.
	AfterCheck func()
}

// Verify checks the bbolt file at path. A missing or empty file passes
// (bbolt creates it). Errors wrap ErrDamaged when the file is damaged.
func Verify(ctx context.Context, path string, o Options) error {
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if st.Size() == 0 {
		return nil
	}
	return Guard(path, func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			if errors.Is(err, berrors.ErrTimeout) {
				return fmt.Errorf("check %s: the file is in use by another process", path)
			}
			return fmt.Errorf("%w %s: %v", ErrDamaged, path, err)
		}
		defer db.Close()
		tx, err := db.Begin(false)
		if err != nil {
			return fmt.Errorf("%w %s: %v", ErrDamaged, path, err)
		}
		defer tx.Rollback()
		// The meta page's high-water mark is how far the pages reach; a
		// page past the end of the file is a fault when bbolt maps it.
		if reach := tx.Size(); reach > st.Size() {
			return fmt.Errorf("%w %s: truncated: its pages reach %d bytes, the file holds %d", ErrDamaged, path, reach, st.Size())
		}
		if !o.Full {
			return nil
		}
		return CheckTx(ctx, path, tx, o)
	})
}

// CheckTx is Verify's full check on a transaction the caller holds: bbolt's
// consistency check of what tx sees, then a read of every byte of the file
// at path at o.BytesPerSecond. Run it under Guard, with no commit to the
// database until o.AfterCheck is called (see Options.AfterCheck).
func CheckTx(ctx context.Context, path string, tx *bolt.Tx, o Options) error {
	err := check(ctx, tx, o.MaxErrors)
	if o.AfterCheck != nil {
		o.AfterCheck()
	}
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrDamaged, path, err)
	}
	return readAll(ctx, path, o.BytesPerSecond)
}

// check runs bbolt's consistency check, collecting up to max errors.
func check(ctx context.Context, tx *bolt.Tx, max int) error {
	if max <= 0 {
		max = 10
	}
	var errs []error
	ch := tx.Check()
	for err := range ch {
		if len(errs) < max {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("consistency check: %w", errors.Join(errs...))
	}
	return ctx.Err()
}

// readAll reads the whole file through a small buffer, at most
// bytesPerSecond (0: unbounded).
func readAll(ctx context.Context, path string, bytesPerSecond int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	const chunk = 1 << 20
	buf := make([]byte, chunk)
	start := time.Now()
	var done int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.Read(buf)
		done += int64(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w %s: unreadable at byte %d: %v", ErrDamaged, path, done, err)
		}
		if bytesPerSecond > 0 {
			due := start.Add(time.Duration(float64(done) / float64(bytesPerSecond) * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
		}
	}
}

// ErrPanic marks a panic under Guard that neither bbolt raised nor a fault
// on mapped memory caused: a defect in the caller's own code, which says
// nothing about the file. It must not send a node to rebuild a file that
// is sound (a rebuilt file would meet the same panic again).
var ErrPanic = errors.New("panic outside bbolt")

// Guard runs fn, which opens or reads the bbolt file at path, on the
// calling goroutine with memory faults turned into panics, and turns a
// panic into an error. bbolt panics on a page that does not identify as
// itself and faults (SIGBUS) on a mapped page past the end of its file;
// neither must end the process without saying which file is damaged, and
// both wrap ErrDamaged. A panic raised outside bbolt's code that is not a
// memory fault (a nil dereference or an index out of range in the
// caller's function) wraps ErrPanic instead and names where it was
// raised. Only what fn does on this goroutine is guarded.
func Guard(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = panicError(path, r, panicSite())
		}
	}()
	return fn()
}

// bboltPackage prefixes the functions of bbolt and its internal packages.
const bboltPackage = "go.etcd.io/bbolt"

// panicError classifies a recovered panic raised in function site.
func panicError(path string, r any, site string) error {
	if _, fault := r.(interface{ Addr() uintptr }); fault || strings.HasPrefix(site, bboltPackage) {
		// A fault on mapped memory (SetPanicOnFault reports its address)
		// is the file's pages, whoever read them; a panic in bbolt is its
		// verdict on a page.
		return fmt.Errorf("%w %s: %v", ErrDamaged, path, r)
	}
	return fmt.Errorf("%w while using %s, in %s: %v (a defect in scadad, not in the file)", ErrPanic, path, site, r)
}

// panicSite returns the function that raised the panic being recovered:
// the first frame below runtime.gopanic that is not the runtime's own (a
// nil dereference passes through runtime.sigpanic and runtime.panicmem).
// Called from the deferred function, whose caller's stack still holds the
// panicking frames.
func panicSite() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	inPanic := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			inPanic = true
		case inPanic && !strings.HasPrefix(f.Function, "runtime."):
			return f.Function
		}
		if !more {
			return "an unknown function"
		}
	}
}
