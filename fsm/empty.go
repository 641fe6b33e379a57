package fsm

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"
)

// Empty empties the state for a rejoin (the heal's hand-over, the rebuild
// of a damaged state) by restoring the snapshot of an empty state, built
// in scratchDir: the swap is atomic and readers never see a half-reset
// file.
func (f *FSM) Empty(ctx context.Context, scratchDir string) error {
	path := filepath.Join(scratchDir, "heal-empty.db")
	_ = os.Remove(path)
	defer os.Remove(path)
	empty, err := Open(path, Options{Logger: zerolog.Nop(), NoSync: true, InitialMmapSize: 1 << 20})
	if err != nil {
		return fmt.Errorf("create an empty state: %w", err)
	}
	defer empty.Close()
	pr, pw := io.Pipe()
	go func() {
		_, err := empty.Backup(pw)
		pw.CloseWithError(err)
	}()
	if err := f.Restore(pr); err != nil {
		return fmt.Errorf("empty the state: %w", err)
	}
	return ctx.Err()
}
