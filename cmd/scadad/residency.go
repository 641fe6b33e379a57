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
// handed back to the kernel whatever the traffic. Writes and raft reads
// release them as they go (fsm.Options.ReleasePages,
// raftnode.Config.ReleaseLogPages); this catches what readers touched.
const mappedReleaseInterval = 5 * time.Second

// releaseMappedPages keeps the pages bbolt has read of its two files from
// piling up in scadad's resident size (see package mapped): every interval
// it unmaps the state file's pages while the FSM holds its map still, and
// asks the kernel to reclaim the raft log's.
func releaseMappedPages(ctx context.Context, state *fsm.FSM, logPath string, every time.Duration, log zerolog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := state.WithStableMap(dropMapped)
		if err == nil {
			err = pageOutMapped(logPath)
		}
		switch {
		case err != nil && !failing:
			log.Warn().Err(err).Msg("cannot release mapped pages of the bbolt files; the resident size will include them")
		case err == nil && failing:
			log.Info().Msg("releasing mapped pages of the bbolt files again")
		}
		failing = err != nil
	}
}

// dropMapped unmaps the resident pages of path's mappings from this
// process; they stay in the page cache. The caller holds the map still.
func dropMapped(path string) error {
	rs, err := mapped.Ranges(path)
	if err == nil {
		err = mapped.Drop(rs)
	}
	if err != nil {
		return fmt.Errorf("release mapped pages of %s: %w", path, err)
	}
	return nil
}

// pageOutMapped asks the kernel to reclaim the pages of path's mappings;
// safe on a map its owner may move at any time.
func pageOutMapped(path string) error {
	rs, err := mapped.Ranges(path)
	if err == nil {
		err = mapped.PageOut(rs)
	}
	if err != nil {
		return fmt.Errorf("release mapped pages of %s: %w", path, err)
	}
	return nil
}
