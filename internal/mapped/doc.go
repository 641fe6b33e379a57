// Package mapped finds the memory mappings of a file in this process and
// hands their resident pages back to the kernel.
//
// bbolt reads its file through a shared, read-only memory map. Every page a
// read or a copy-on-write commit touches stays mapped, and counts in the
// process's resident size, until the kernel needs the memory: with a large
// store-and-forward buffer the resident size grows towards the size of the
// files although the pages are clean page cache. Releasing them keeps the
// resident size a measure of the process's own memory.
//
// It owns reading /proc/self/maps and calling madvise. It must not decide
// when a mapping is stable: Drop is only safe while the owner of the map
// cannot move or unmap it (for bbolt, while no write transaction runs or a
// read transaction is open). On systems other than Linux it does nothing.
package mapped
