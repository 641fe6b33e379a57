package raftnode

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestLogLinesCarryOneNodeKey: scadad's logger already names the node
// (node=<id>), so no line raftnode or raft writes may carry a second "node"
// key: log tools keep the last one, and raft's own "node" (its String(),
// "Node at ADDR [Candidate]") would attribute the line to no node at all.
func TestLogLinesCarryOneNodeKey(t *testing.T) {
	h := newHarness(t, ModeStrict, []string{"a"}, "")
	h.tweak = func(c *Config) {
		c.Logger = zerolog.New(h.logs["a"]).With().Timestamp().Str("node", "a").Logger().Level(zerolog.DebugLevel)
	}
	h.start("a")
	h.waitOneActive(10 * time.Second)

	lines, sawCandidate := 0, false
	sc := bufio.NewScanner(strings.NewReader(h.logs["a"].String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "entering candidate state") {
			sawCandidate = true
		}
		dec := json.NewDecoder(strings.NewReader(line))
		if _, err := dec.Token(); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		nodes := 0
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if key == "node" {
				nodes++
				if string(v) != `"a"` {
					t.Errorf("node key is %s, not \"a\": %s", v, line)
				}
			}
		}
		if nodes != 1 {
			t.Errorf("%d node keys in %s", nodes, line)
		}
		lines++
	}
	if lines == 0 || !sawCandidate {
		t.Fatalf("want raft's election lines in the log, got %d lines:\n%s", lines, h.logs["a"].String())
	}
}
