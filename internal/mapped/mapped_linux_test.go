package mapped

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestParseMaps(t *testing.T) {
	maps := []byte(`00400000-00452000 r-xp 00000000 fd:01 1311 /usr/bin/scadad
7f00a0000000-7f00e0000000 r--s 00000000 fd:01 9876 /data/fsm.db
7f00e0000000-7f00e0001000 r--s 00000000 fd:02 9876 /other/device/same/inode
7f00f0000000-7f00f0100000 r--s 00000000 fd:01 98765 /data/raft.db
7f0100000000-7f0100021000 rw-p 00000000 00:00 0
7f0200000000-7f0200004000 r--s 00000000 fd:01 9876 /data/fsm.db (deleted)
`)
	got, err := parseMaps(maps, 0xfd, 0x01, 9876)
	if err != nil {
		t.Fatal(err)
	}
	want := []Range{{0x7f00a0000000, 0x7f00e0000000}, {0x7f0200000000, 0x7f0200004000}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parseMaps = %x, want %x", got, want)
	}
	if _, err := parseMaps([]byte("zz-yy r--s 0 fd:01 9876 /data/fsm.db\n"), 0xfd, 1, 9876); err == nil {
		t.Fatal("a malformed address range was accepted")
	}
}

// residentKB is ResidentKB of the test's file, which only the test maps.
func residentKB(t *testing.T, path string) int {
	t.Helper()
	kb, err := ResidentKB(path)
	if err != nil {
		t.Fatal(err)
	}
	return kb
}

func TestReleaseResidentPagesOfAMappedFile(t *testing.T) {
	const size = 8 << 20
	path := filepath.Join(t.TempDir(), "state.db")
	content := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		name    string
		release func([]Range) error
	}{
		{"drop", Drop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(data)
			start := uintptr(unsafe.Pointer(&data[0]))
			var sum int
			for i := 0; i < size; i += 4096 {
				sum += int(data[i])
			}
			if sum != int('0')*size/4096 { // every page starts with "0"
				t.Fatalf("read sum %d", sum)
			}
			before := residentKB(t, path)
			if before < size>>10/2 {
				t.Fatalf("only %d kB resident after reading all %d kB", before, size>>10)
			}
			rs, err := Ranges(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 1 || rs[0].Start != start || rs[0].End-rs[0].Start != size {
				t.Fatalf("Ranges = %x, want one range at %#x of %d bytes", rs, start, size)
			}
			if err := tc.release(rs); errors.Is(err, unix.EINVAL) {
				t.Skipf("kernel refuses the advice: %v", err)
			} else if err != nil {
				t.Fatal(err)
			}
			if after := residentKB(t, path); after > before/4 {
				t.Fatalf("%d kB resident after release, %d before", after, before)
			}
			if !bytes.Equal(data, content) {
				t.Fatal("mapping reads other bytes after release")
			}
		})
	}
}

func TestResidentKBCountsTheFilesMappingsOnly(t *testing.T) {
	smaps := []byte(`7f00a0000000-7f00e0000000 r--s 00000000 fd:01 9876 /data/fsm.db
Size:            1048576 kB
Rss:                2048 kB
Pss:                2048 kB
7f00e0000000-7f00e0001000 rw-p 00000000 00:00 0
Rss:                  64 kB
7f0200000000-7f0200004000 r--s 00000000 fd:01 9876 /data/fsm.db (deleted)
Rss:                  12 kB
`)
	got, err := residentIn(smaps, []Range{{0x7f00a0000000, 0x7f00e0000000}, {0x7f0200000000, 0x7f0200004000}})
	if err != nil || got != 2060 {
		t.Fatalf("residentIn = %d, %v; want 2060 kB", got, err)
	}
	if _, err := residentIn([]byte("7f00a0000000-7f00e0000000 r--s 0 fd:01 9876 /f\nRss: many kB\n"), []Range{{0x7f00a0000000, 0x7f00e0000000}}); err == nil {
		t.Fatal("a malformed Rss line was accepted")
	}
}
