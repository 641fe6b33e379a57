package lockedbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Concurrent writers and readers (run with -race): every write is kept whole.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
}
