package boltsafe

import (
	"context"
	"testing"

	"github.com/scadad/scadad/internal/mapped"
)

// The full check reads every page through its map; AfterCheck is called
// while the map is there to hand them back, and at least once at the end.
func TestTheCheckHandsBackWhatItRead(t *testing.T) {
	path := newFile(t)
	var before, after []int
	handBack := func() {
		kb, err := mapped.ResidentKB(path)
		if err != nil {
			t.Error(err)
		}
		before = append(before, kb)
		rs, err := mapped.Ranges(path)
		if err == nil {
			err = mapped.Drop(rs)
		}
		if err != nil {
			t.Error(err)
		}
		kb, _ = mapped.ResidentKB(path)
		after = append(after, kb)
	}
	if err := Verify(context.Background(), path, Options{Full: true, AfterCheck: handBack}); err != nil {
		t.Fatal(err)
	}
	if len(before) == 0 {
		t.Fatal("AfterCheck was not called")
	}
	last := len(before) - 1
	t.Logf("%d calls; at the last %d kB resident before, %d kB after", len(before), before[last], after[last])
	if before[last] < 64 || after[last] > before[last]/4 {
		t.Fatalf("at the check's end %d kB of the file were resident and %d kB after handing back; want the pages the check read, then few", before[last], after[last])
	}
}
