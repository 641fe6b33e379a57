package siteconfig

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
)

// Revision is the deploy revision a site was applied at; revisions only
// grow, but for a restore of the whole replicated state from a backup
// (Holder.Rewind). 0 means nothing has been applied.
type Revision uint64

// Update is one configuration a watcher receives: the site, its revision,
// and what changed since the site this watcher last received (from nothing,
// for the first one).
type Update struct {
	Site     *Site
	Revision Revision
	Changes  Changes
}

// ErrStaleRevision is returned by Set for a revision older than the
// current one, or the current revision with different content.
var ErrStaleRevision = errors.New("stale site config revision")

// Holder keeps a node's current site configuration and hands it, with its
// changes, to the workers. It only ever holds a site that validated: a
// failed Set or SetArtifact leaves the last known good configuration in
// place, so an unreadable artifact is no answer, never an empty
// configuration. Sites handed out are shared and must not be modified.
type Holder struct {
	mu       sync.Mutex
	site     *Site
	rev      Revision
	watchers map[*watcher]struct{}
}

type watcher struct {
	ch chan Update
	// sent is the site of the newest update put on ch; pendingBase the
	// site that update's Changes were computed from. When the watcher has
	// not taken the pending update yet, its replacement is diffed from
	// pendingBase, so skipping an update never loses a change.
	sent        *Site
	pendingBase *Site
}

// NewHolder returns a Holder with nothing applied yet.
func NewHolder() *Holder {
	return &Holder{watchers: make(map[*watcher]struct{})}
}

// Current returns the current site and its revision; (nil, 0) before the
// first successful Set.
func (h *Holder) Current() (*Site, Revision) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.site, h.rev
}

// Set makes site the current configuration at rev after validating it, and
// offers it to every watcher. It keeps its own copy, so the caller may
// reuse site. Setting the current revision again with the same content is
// a no-op; an older revision, or the current one with other content, is
// ErrStaleRevision. A nil or invalid site is rejected (a *ValidationError
// for an invalid one) and changes nothing.
func (h *Holder) Set(site *Site, rev Revision) error {
	return h.set(site, rev, false)
}

// Rewind is Set for a revision at or below the current one: the replicated
// state was restored from a backup, and the deployment it holds is the one
// to run, although an older or other revision than the current one. It
// validates and offers the site to the watchers like Set.
func (h *Holder) Rewind(site *Site, rev Revision) error {
	return h.set(site, rev, true)
}

func (h *Holder) set(site *Site, rev Revision, rewind bool) error {
	if site == nil {
		return fmt.Errorf("set site config revision %d: no site", rev)
	}
	if err := site.Validate(); err != nil {
		return fmt.Errorf("set site config revision %d: %w", rev, err)
	}
	if rev == 0 {
		return fmt.Errorf("set site config: revision 0 is reserved for nothing applied")
	}
	own := site.Clone()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case rev == h.rev && Equal(own, h.site):
		return nil // a replayed apply of what is already current
	case rev <= h.rev && !rewind:
		return fmt.Errorf("set site config revision %d (current %d): %w", rev, h.rev, ErrStaleRevision)
	}
	prev := h.site
	h.site, h.rev = own, rev
	// Most watchers keep up and get the same changes: diff once for them.
	var fromPrev *Changes
	for w := range h.watchers {
		h.offer(w, func(base *Site) Changes {
			if base != prev {
				return Diff(base, own)
			}
			if fromPrev == nil {
				c := Diff(prev, own)
				fromPrev = &c
			}
			return *fromPrev
		})
	}
	return nil
}

// SetArtifact parses an artifact and sets it at rev; on any failure the
// current configuration stays as it was.
func (h *Holder) SetArtifact(artifact []byte, rev Revision) error {
	site, err := Parse(artifact)
	if err != nil {
		return fmt.Errorf("apply site config revision %d: %w", rev, err)
	}
	return h.Set(site, rev)
}

// RewindArtifact parses an artifact and rewinds to it at rev (Rewind).
func (h *Holder) RewindArtifact(artifact []byte, rev Revision) error {
	site, err := Parse(artifact)
	if err != nil {
		return fmt.Errorf("apply site config revision %d: %w", rev, err)
	}
	return h.Rewind(site, rev)
}

// Watch returns a channel that receives the current configuration at once
// (if there is one) and every later one, and a function that ends the
// watch. A watcher that falls behind skips intermediate revisions; the
// Changes it then receives span everything it skipped.
func (h *Holder) Watch() (<-chan Update, func()) {
	w := &watcher{ch: make(chan Update, 1)}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	if h.site != nil {
		site := h.site
		h.offer(w, func(base *Site) Changes { return Diff(base, site) })
	}
	h.mu.Unlock()
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.watchers, w)
			h.mu.Unlock()
		})
	}
}

// offer puts the current site on w's channel, replacing an update w has
// not taken yet; diff computes the changes from the site w last had.
// Called with h.mu held.
func (h *Holder) offer(w *watcher, diff func(base *Site) Changes) {
	base := w.sent
	select {
	case <-w.ch:
		base = w.pendingBase
	default:
	}
	w.ch <- Update{Site: h.site, Revision: h.rev, Changes: diff(base)}
	w.pendingBase, w.sent = base, h.site
}

// Equal reports whether two sites have the same canonical form.
func Equal(a, b *Site) bool {
	ca, errA := Canonical(a)
	cb, errB := Canonical(b)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}
