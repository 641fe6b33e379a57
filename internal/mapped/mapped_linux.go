package mapped

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Range is one mapping, [Start, End).
type Range struct {
	Start, End uintptr
}

// Ranges returns the mappings of the file at path in this process, matched
// by device and inode (the file may have been opened by another name).
func Ranges(path string) ([]Range, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("find mappings of %s: %w", path, err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("find mappings of %s: %w", path, err)
	}
	return parseMaps(maps, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}

// parseMaps picks the lines of a /proc/PID/maps text that map the file
// (major:minor, inode). A line: "start-end perms offset major:minor inode path".
func parseMaps(maps []byte, major, minor uint32, ino uint64) ([]Range, error) {
	var out []Range
	sc := bufio.NewScanner(bytes.NewReader(maps))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[4] != strconv.FormatUint(ino, 10) {
			continue
		}
		maj, minr, ok := strings.Cut(f[3], ":")
		if !ok {
			continue
		}
		if m, err := strconv.ParseUint(maj, 16, 32); err != nil || uint32(m) != major {
			continue
		}
		if m, err := strconv.ParseUint(minr, 16, 32); err != nil || uint32(m) != minor {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("parse maps line %q", sc.Text())
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("parse maps line %q", sc.Text())
		}
		out = append(out, Range{Start: uintptr(start), End: uintptr(end)})
	}
	return out, sc.Err()
}

// ResidentKB is how much of the file at path this process has mapped and
// resident, in kB (the Rss of its mappings in /proc/self/smaps).
func ResidentKB(path string) (int, error) {
	rs, err := Ranges(path)
	if err != nil || len(rs) == 0 {
		return 0, err
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("resident pages of %s: %w", path, err)
	}
	return residentIn(smaps, rs)
}

// residentIn sums the Rss lines of the smaps entries that start at one of
// rs. An entry: a maps line, then "Key: value kB" lines.
func residentIn(smaps []byte, rs []Range) (int, error) {
	starts := make(map[uintptr]bool, len(rs))
	for _, r := range rs {
		starts[r.Start] = true
	}
	total, in := 0, false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a maps line opens an entry
			lo, _, ok := strings.Cut(f[0], "-")
			start, err := strconv.ParseUint(lo, 16, 64)
			in = ok && err == nil && starts[uintptr(start)]
			continue
		}
		if in && f[0] == "Rss:" && len(f) >= 2 {
			kb, err := strconv.Atoi(f[1])
			if err != nil {
				return 0, fmt.Errorf("parse smaps line %q", sc.Text())
			}
			total += kb
		}
	}
	return total, sc.Err()
}

// Drop unmaps the resident pages of rs from this process (MADV_DONTNEED).
// For a shared file mapping the pages stay in the page cache and the next
// read maps them again. The caller must make sure nothing unmaps or
// replaces rs meanwhile: on a range reused for anonymous memory, Drop would
// zero it.
func Drop(rs []Range) error { return advise(rs, unix.MADV_DONTNEED, "MADV_DONTNEED") }

func advise(rs []Range, advice int, name string) error {
	for _, r := range rs {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.End-r.Start, uintptr(advice)); errno != 0 {
			return fmt.Errorf("%s %#x-%#x: %w", name, r.Start, r.End, errno)
		}
	}
	return nil
}
