//go:build unix

package testcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ResidentFilesKB sums the resident pages of n's file mappings by the
// file's base name, in kB (from /proc/PID/smaps; nil if unreadable).
func (n *Node) ResidentFilesKB() map[string]int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", n.PID()))
	if err != nil {
		return nil
	}
	kb := map[string]int{}
	var file string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			file = ""
			if len(f) >= 6 && strings.HasPrefix(f[5], "/") {
				file = filepath.Base(f[5])
			}
		case len(f) == 3 && f[0] == "Rss:" && file != "":
			var v int
			fmt.Sscanf(f[1], "%d", &v)
			kb[file] += v
		}
	}
	return kb
}
