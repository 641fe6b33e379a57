package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/internal/mapped"
)

// mappedReleaseInterval is how often the bbolt files' mapped pages are
// handed back to the kernel.
const mappedReleaseInterval = 5 * time.Second

// releaseMappedPages keeps the pages bbolt has read of its two files from
// piling up in scadad's resident size (see package mapped): every interval
// it unmaps the state file's pages while the FSM holds its map still (they
// stay in the page cache), and asks the kernel to reclaim the raft log's,
// which needs no such hold (raft-boltdb's map cannot be held from here).
func releaseMappedPages(ctx context.Context, state *fsm.FSM, logPath string, every time.Duration, log zerolog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := releaseOnce(state, logPath)
		switch {
		case err != nil && err.Error() != lastErr:
			log.Warn().Err(err).Msg("cannot release mapped pages of the bbolt files; the resident size will include them")
		case err == nil && lastErr != "":
			log.Info().Msg("releasing mapped pages of the bbolt files again")
		}
		lastErr = ""
		if err != nil {
			lastErr = err.Error()
		}
	}
}

func releaseOnce(state *fsm.FSM, logPath string) error {
	err := state.WithStableMap(func(path string) error {
		rs, err := mapped.Ranges(path)
		if err != nil {
			return err
		}
		return mapped.Drop(rs)
	})
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	rs, err := mapped.Ranges(logPath)
	if err == nil {
		err = mapped.PageOut(rs)
	}
	if err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	return nil
}
