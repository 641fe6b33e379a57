//go:build windows || !(amd64 || arm64 || ppc64 || ppc64le || s390x || riscv64 || loong64 || mips64 || mips64le)

package fsm

// DefaultMmapSize is the state file's default map size. bbolt on Windows
// grows the file itself to the map size, and 32-bit systems lack the
// address space for the 16 GiB used elsewhere: a snapshot taken while the
// file outgrows this map holds commits up until it is written.
const DefaultMmapSize = 256 << 20
