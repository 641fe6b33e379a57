package siteconfig

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// withAttribute returns validSite plus extra attributes on Pump1.
func withAttribute(names ...string) *Site {
	s := validSite()
	for _, n := range names {
		s.Instances[0].Attributes = append(s.Instances[0].Attributes, Attribute{Name: n, Type: TypeInt32, Tag: "Pump1." + n})
	}
	return s
}

func receive(t *testing.T, ch <-chan Update) Update {
	t.Helper()
	select {
	case u := <-ch:
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("no update within 5 s")
		return Update{}
	}
}

func noUpdate(t *testing.T, ch <-chan Update) {
	t.Helper()
	select {
	case u := <-ch:
		t.Fatalf("unexpected update at revision %d", u.Revision)
	default:
	}
}

func TestHolderStartsEmpty(t *testing.T) {
	h := NewHolder()
	if s, rev := h.Current(); s != nil || rev != 0 {
		t.Fatalf("new holder holds %v at %d", s, rev)
	}
	ch, stop := h.Watch()
	defer stop()
	noUpdate(t, ch)
}

func TestHolderRejectsWhatItCannotUse(t *testing.T) {
	h := NewHolder()
	good := validSite()
	if err := h.Set(good, 5); err != nil {
		t.Fatal(err)
	}
	invalid := validSite()
	invalid.Instances[0].Attributes[0].Tag = ""
	tests := []struct {
		name string
		set  func() error
		is   func(error) bool
	}{
		{"nil site", func() error { return h.Set(nil, 6) }, nil},
		{"invalid site", func() error { return h.Set(invalid, 6) }, func(err error) bool {
			var verr *ValidationError
			return errors.As(err, &verr) && verr.Problems[0].Path == "instances[0].attributes[0].tag"
		}},
		{"revision zero", func() error { return h.Set(validSite(), 0) }, nil},
		{"older revision", func() error { return h.Set(withAttribute("X"), 4) }, func(err error) bool { return errors.Is(err, ErrStaleRevision) }},
		{"same revision, other content", func() error { return h.Set(withAttribute("X"), 5) }, func(err error) bool { return errors.Is(err, ErrStaleRevision) }},
		{"empty artifact", func() error { return h.SetArtifact(nil, 6) }, nil},
		{"zero bytes of YAML", func() error { return h.SetArtifact([]byte("\n"), 6) }, nil},
		{"unreadable artifact", func() error { return h.SetArtifact([]byte("version: 1\nconnections: {"), 6) }, nil},
		{"invalid artifact", func() error { return h.SetArtifact([]byte(minimalYAML+"hot_standby: maybe\n"), 6) }, nil},
	}
	ch, stop := h.Watch()
	defer stop()
	receive(t, ch) // the current one
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.set()
			if err == nil {
				t.Fatal("accepted")
			}
			if tt.is != nil && !tt.is(err) {
				t.Fatalf("wrong error: %v", err)
			}
			// Last known good stays: no answer, never an empty config.
			s, rev := h.Current()
			if rev != 5 || !Equal(s, good) {
				t.Fatalf("current changed to revision %d", rev)
			}
			noUpdate(t, ch)
		})
	}
}

func TestHolderReplayOfCurrentIsNoOp(t *testing.T) {
	h := NewHolder()
	if err := h.Set(validSite(), 3); err != nil {
		t.Fatal(err)
	}
	ch, stop := h.Watch()
	defer stop()
	receive(t, ch)
	if err := h.Set(validSite(), 3); err != nil {
		t.Fatalf("replay of the current revision: %v", err)
	}
	noUpdate(t, ch)
}

func TestHolderWatchGetsCurrentThenChanges(t *testing.T) {
	h := NewHolder()
	if err := h.SetArtifact([]byte(minimalYAML), 1); err != nil {
		t.Fatal(err)
	}
	ch, stop := h.Watch()
	defer stop()
	u := receive(t, ch)
	if u.Revision != 1 || len(u.Changes.Instances) != 1 || u.Changes.Instances[0].Kind != Added {
		t.Fatalf("first update: rev %d, changes %v", u.Revision, summary(u.Changes))
	}
	next := validSite()
	if err := h.Set(next, 2); err != nil {
		t.Fatal(err)
	}
	u = receive(t, ch)
	if u.Revision != 2 || !Equal(u.Site, next) {
		t.Fatalf("second update: rev %d", u.Revision)
	}
	if _, ok := u.Changes.Instance("Skid"); !ok {
		t.Errorf("changes do not say Skid was added: %v", summary(u.Changes))
	}
}

func TestHolderSlowWatcherGetsEverythingItSkipped(t *testing.T) {
	h := NewHolder()
	if err := h.Set(validSite(), 1); err != nil {
		t.Fatal(err)
	}
	ch, stop := h.Watch()
	defer stop()
	receive(t, ch)
	// Two revisions land while the worker is busy.
	if err := h.Set(withAttribute("A"), 2); err != nil {
		t.Fatal(err)
	}
	if err := h.Set(withAttribute("A", "B"), 3); err != nil {
		t.Fatal(err)
	}
	u := receive(t, ch)
	if u.Revision != 3 {
		t.Fatalf("got revision %d, want the newest, 3", u.Revision)
	}
	got := summary(u.Changes)
	want := []string{"changed instance Pump1 []", "added attribute Pump1/ A", "added attribute Pump1/ B"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("changes = %q, want %q (relative to revision 1, which the watcher had)", got, want)
	}
	noUpdate(t, ch)
}

func TestHolderWatcherThatNeverReadGetsAllAsAdded(t *testing.T) {
	h := NewHolder()
	ch, stop := h.Watch()
	defer stop()
	if err := h.Set(validSite(), 1); err != nil {
		t.Fatal(err)
	}
	if err := h.Set(withAttribute("A"), 2); err != nil {
		t.Fatal(err)
	}
	u := receive(t, ch)
	if u.Revision != 2 {
		t.Fatalf("revision %d", u.Revision)
	}
	in, ok := u.Changes.Instance("Pump1")
	if !ok || in.Kind != Added || len(in.Attributes) != 3 {
		t.Fatalf("Pump1 change = %+v; the watcher never had revision 1", in)
	}
}

func TestHolderStopEndsWatch(t *testing.T) {
	h := NewHolder()
	ch, stop := h.Watch()
	stop()
	stop() // idempotent
	if err := h.Set(validSite(), 1); err != nil {
		t.Fatal(err)
	}
	noUpdate(t, ch)
}

func TestHolderKeepsItsOwnCopy(t *testing.T) {
	h := NewHolder()
	s := validSite()
	if err := h.Set(s, 1); err != nil {
		t.Fatal(err)
	}
	s.Instances[0].Attributes[0].Tag = "" // the caller reuses its site
	cur, _ := h.Current()
	if err := cur.Validate(); err != nil {
		t.Fatalf("caller's change reached the holder: %v", err)
	}
}

// Many setters and watchers at once: run with -race. Every watcher must
// end on the newest revision, and replaying its changes must agree.
func TestHolderConcurrent(t *testing.T) {
	h := NewHolder()
	const revisions = 40
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		ch, stop := h.Watch()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stop()
			var last Revision
			// The attributes of Pump1 as rebuilt from the changes alone.
			attrs := make(map[string]bool)
			for {
				select {
				case u := <-ch:
					if u.Revision <= last {
						t.Errorf("watcher %d: revision went from %d to %d", w, last, u.Revision)
						return
					}
					last = u.Revision
					if ic, ok := u.Changes.Instance("Pump1"); ok {
						for _, a := range ic.Attributes {
							attrs[a.Name] = a.Kind != Removed
						}
					}
					if last == revisions {
						var want int
						for _, a := range u.Site.Instances[0].Attributes {
							want++
							if !attrs[a.Name] {
								t.Errorf("watcher %d: changes never added %s", w, a.Name)
							}
						}
						var have int
						for _, present := range attrs {
							if present {
								have++
							}
						}
						if have != want {
							t.Errorf("watcher %d: rebuilt %d attributes, site has %d", w, have, want)
						}
						return
					}
				case <-ctx.Done():
					t.Errorf("watcher %d: stuck at revision %d", w, last)
					return
				}
			}
		}()
	}
	for rev := Revision(1); rev <= revisions; rev++ {
		names := make([]string, rev)
		for i := range names {
			names[i] = fmt.Sprintf("A%d", i)
		}
		if err := h.Set(withAttribute(names...), rev); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// TestHolderRewind: after a restore of the replicated state the deployed
// revision can be older than, or other at the same number than, the one
// running; Rewind applies it and tells the watchers what changed. It still
// refuses what Set refuses for any other reason.
func TestHolderRewind(t *testing.T) {
	h := NewHolder()
	if err := h.Set(withAttribute("A", "B"), 5); err != nil {
		t.Fatal(err)
	}
	ch, stop := h.Watch()
	defer stop()
	receive(t, ch)

	if err := h.Rewind(withAttribute("A"), 3); err != nil {
		t.Fatalf("rewind to an older revision: %v", err)
	}
	u := receive(t, ch)
	if s, rev := h.Current(); rev != 3 || !Equal(s, withAttribute("A")) || u.Revision != 3 || u.Changes.Empty() {
		t.Fatalf("after rewind: revision %d, update at %d with changes %+v", rev, u.Revision, u.Changes)
	}
	if err := h.Rewind(withAttribute("C"), 3); err != nil {
		t.Fatalf("rewind to other content at the same revision: %v", err)
	}
	receive(t, ch)
	if err := h.Rewind(withAttribute("C"), 3); err != nil {
		t.Fatalf("rewind to what is current: %v", err)
	}
	noUpdate(t, ch)
	invalid := validSite()
	invalid.Instances[0].Attributes[0].Tag = ""
	for name, err := range map[string]error{
		"invalid site":  h.Rewind(invalid, 2),
		"revision zero": h.Rewind(validSite(), 0),
		"nil site":      h.Rewind(nil, 2),
	} {
		if err == nil {
			t.Errorf("rewind with %s accepted", name)
		}
	}
	if s, rev := h.Current(); rev != 3 || !Equal(s, withAttribute("C")) {
		t.Fatalf("refused rewinds changed the current site to revision %d", rev)
	}
	noUpdate(t, ch)
}
