//go:build unix

package testcluster

import (
	"os"
	"strings"
	"testing"
)

func TestLogStoryCollapsesRunsOfOneMessage(t *testing.T) {
	n := &Node{Dir: t.TempDir()}
	lines := []string{
		`{"message":"started"}`,
		`{"message":"STATE DIVERGED"}`,
		`{"message":"delivery failed","attempt":1}`,
		`{"message":"delivery failed","attempt":2}`,
		`{"message":"delivery failed","attempt":3}`,
		`not json`,
	}
	if err := os.WriteFile(n.LogPath(), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`{"message":"STATE DIVERGED"}`,
		`(3 lines with this message, the last:)`,
		`{"message":"delivery failed","attempt":3}`,
		`not json`,
	}, "\n")
	if got := n.LogStory(3); got != want {
		t.Errorf("LogStory(3) =\n%s\nwant\n%s", got, want)
	}
}
