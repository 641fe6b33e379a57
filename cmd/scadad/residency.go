package main

import (
	"context"
	"fmt"
	"time"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/internal/mapped"
	"github.com/scadad/scadad/raftnode"
)

// mappedReleaseInterval is how often the bbolt files' mapped pages are
// handed back to the kernel whatever the traffic. Commits and raft's log
// traffic release pages as they go (fsm.Options.ReleasePages,
// raftnode.Config.ReleaseLogPages); this catches what readers touched and
// what the last writes left.
const mappedReleaseInterval = 5 * time.Second

// releaseMappedPages hands, every interval, the bbolt files' mapped pages
// back to the kernel (see package mapped); each part reports its own
// failures.
func releaseMappedPages(ctx context.Context, state *fsm.FSM, node *raftnode.Node, every time.Duration) {
	everyTick(ctx, every, func() bool {
		node.ReleaseLogPages()
		state.ReleasePages()
		return true
	})
}

// dropMapped unmaps the resident pages of path's mappings from this
// process; they stay in the page cache. The caller makes sure the map's
// owner cannot move or unmap it meanwhile.
func dropMapped(path string) error {
	drop, err := mappedPages(path)
	if err == nil {
		err = drop()
	}
	return err
}

// mappedPages finds path's mappings in this process and returns what
// unmaps their resident pages, which the caller may call for as long as
// it keeps the map's owner from moving or unmapping them (a walk of the
// whole state, under one read transaction, calls it every MiB it reads;
// finding the mappings costs more than dropping their pages).
func mappedPages(path string) (func() error, error) {
	rs, err := mapped.Ranges(path)
	if err != nil {
		return nil, fmt.Errorf("release mapped pages of %s: %w", path, err)
	}
	return func() error {
		if err := mapped.Drop(rs); err != nil {
			return fmt.Errorf("release mapped pages of %s: %w", path, err)
		}
		return nil
	}, nil
}
