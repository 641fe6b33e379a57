package storeforward

import (
	"context"
	"testing"
)

// bdSeq counts in the replicated state from 0 and wraps after 255.
func TestBirthsCountInTheBufferAndWrap(t *testing.T) {
	f := newFSM(t, true)
	b := Births{Proposer: &applyProposer{f: f}, Actor: "node-a"}
	for i := range 258 {
		got, err := b.NextBirth(context.Background(), "edge")
		if err != nil {
			t.Fatal(err)
		}
		if want := uint8(i % 256); got != want {
			t.Fatalf("birth %d: bdSeq %d, want %d", i, got, want)
		}
	}
	if got, err := b.NextBirth(context.Background(), "other"); err != nil || got != 0 {
		t.Fatalf("first birth of another target: %d, %v", got, err)
	}
}
