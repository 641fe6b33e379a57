// Package tty tells whether output goes to a terminal, so commands write
// colour and carriage-return progress only where a person is watching and
// plain lines into files and pipes. It owns nothing else.
package tty

import (
	"io"
	"os"

	"golang.org/x/term"
)

// Is reports whether w is a terminal. Writers that are not files are not.
func Is(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
