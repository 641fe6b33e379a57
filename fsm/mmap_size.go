//go:build !windows && (amd64 || arm64 || ppc64 || ppc64le || s390x || riscv64 || loong64 || mips64 || mips64le)

package fsm

// DefaultMmapSize is the state file's default map size: 16 GiB of address
// space, far beyond any buffer a site holds, so the map never has to grow
// under a snapshot. It costs no memory: pages are resident only once read
// or written (and are released again, see Options.ReleasePages), and a
// shared read-only map does not count against the commit limit. Windows,
// where bbolt grows the file itself to the map size, and 32-bit systems
// use 256 MiB.
const DefaultMmapSize = 16 << 30
