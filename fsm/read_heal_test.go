package fsm

import (
	"slices"
	"testing"
)

func TestHealReads(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	mustOK(t, f, w.cmd(enqueue(msg("m1", "A", ""), msg("m2", "A", ""), msg("m3", "A", ""), msg("m4", "A", ""))))
	mustOK(t, f, w.cmd(delivered("m1", "ghost")))
	mustOK(t, f, w.cmd(park("m2", "HTTP 500", 3)))
	mustOK(t, f, w.cmd(park("m3", "HTTP 500", 3)))
	mustOK(t, f, w.cmd(discard("", "operator", "m3")))
	mustOK(t, f, w.cmd(park("m4", "HTTP 400", 1)))
	mustOK(t, f, w.cmd(audit("one", "first")))
	mustOK(t, f, w.cmd(audit("two", "second")))

	tests := []struct {
		name     string
		after    uint64
		limit    int
		wantIDs  []string
		wantSeqs []uint64
	}{
		{"all", 0, 10, []string{"m1", "ghost", "m3"}, []uint64{1, 2, 3}},
		{"page", 1, 1, []string{"ghost"}, []uint64{2}},
		{"past the end", 3, 10, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.SFFinishedAfter(tc.after, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			var seqs []uint64
			for _, g := range got {
				ids, seqs = append(ids, g.ID), append(seqs, g.Seq)
			}
			if !slices.Equal(ids, tc.wantIDs) || !slices.Equal(seqs, tc.wantSeqs) {
				t.Fatalf("finished after %d: %v %v, want %v %v", tc.after, ids, seqs, tc.wantIDs, tc.wantSeqs)
			}
		})
	}

	parked, err := f.SFParkedAfter("A", 0, 10)
	if err != nil || len(parked) != 2 || parked[0].ID != "m2" || parked[1].ID != "m4" {
		t.Fatalf("parked: %+v %v", parked, err)
	}
	rest, err := f.SFParkedAfter("A", parked[0].Seq, 10)
	if err != nil || len(rest) != 1 || rest[0].ID != "m4" {
		t.Fatalf("parked after %d: %+v %v", parked[0].Seq, rest, err)
	}

	var kinds []string
	if err := f.AuditNewestFirst(func(e AuditEntry) bool {
		kinds = append(kinds, e.Kind)
		return e.Kind != "one"
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kinds, []string{"two", "one"}) {
		t.Fatalf("audit newest first stopped wrongly: %v", kinds)
	}
}
