// Package boltsafe checks a bbolt file before it is used and turns what a
// damaged file does to bbolt (a panic on a page that does not identify as
// itself, a fault on a page past the end of a truncated file) into an error
// that names the file.
//
// It owns: Verify (the file's pages all lie inside the file, and on request
// bbolt's consistency check and a read of every byte, at a bounded rate) and
// Guard (runs a function that touches a bbolt file, recovering its panics
// and memory faults into errors: ErrDamaged for a fault on mapped memory or
// a panic bbolt raised, ErrPanic, naming the function, for a panic in the
// caller's own code, which says nothing about the file). It must not
// repair, remove or rename a file: what to do with a damaged one is the
// caller's choice.
package boltsafe
