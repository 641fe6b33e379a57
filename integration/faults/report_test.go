package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFaultLabelsNeverOverlap lays out the labels of a 300-round soak
// (a fault every 1 to 6 s, at the picture's least scale) and requires no
// two label boxes to overlap; the same labels on one line, as the picture
// had them, overlap.
func TestFaultLabelsNeverOverlap(t *testing.T) {
	kinds := []string{"partition node-a", "kill node-b", "pause witness", "disk-full node-a", "clock-skew node-b,witness", "loss node-a"}
	rng := rand.New(rand.NewPCG(20261201, 28))
	var ls []label
	at := 0.0
	for i := 0; i < 300; i++ {
		at += 1 + 5*rng.Float64()
		text := kinds[rng.IntN(len(kinds))]
		ls = append(ls, label{X: 90 + at*pxPerSecond, Width: labelWidth(text), Text: text})
	}
	overlapsOnOneLine := 0
	for i := 1; i < len(ls); i++ {
		if ls[i].X < ls[i-1].X+ls[i-1].Width {
			overlapsOnOneLine++
		}
	}
	if overlapsOnOneLine == 0 {
		t.Fatal("the test's labels do not overlap even on one line; it would prove nothing")
	}
	lanes := layoutLabels(ls)
	for i := range ls {
		for j := i + 1; j < len(ls); j++ {
			a, b := ls[i], ls[j]
			if a.Lane == b.Lane && a.X < b.X+b.Width && b.X < a.X+a.Width {
				t.Fatalf("labels %d %q [%.0f, %.0f] and %d %q [%.0f, %.0f] overlap in lane %d", i, a.Text, a.X, a.X+a.Width, j, b.Text, b.X, b.X+b.Width, a.Lane)
			}
		}
	}
	// Lanes stay few: labels at most ~150 px wide, a fault at least every
	// 4 px * 1 s apart, so a handful of lanes at most.
	if lanes < 2 || lanes > 40 {
		t.Fatalf("%d lanes for 300 faults", lanes)
	}
	t.Logf("300 fault labels: %d overlapped on one line, %d lanes", overlapsOnOneLine, lanes)
}

func TestLayoutLabelsKeepsSparseLabelsOnOneLane(t *testing.T) {
	var ls []label
	for i := 0; i < 10; i++ {
		ls = append(ls, label{X: float64(i) * 200, Width: 100, Text: fmt.Sprint(i)})
	}
	if lanes := layoutLabels(ls); lanes != 1 {
		t.Fatalf("%d lanes for labels 100 px apart, want 1", lanes)
	}
}

// TestTimelineSVGOfASoak draws a 300-round picture and checks the labels
// are laid out (no rotated, piled-up text) and the picture is wide enough
// for its axis; SCADAD_TIMELINE_SVG names a file to write it to, to look at.
func TestTimelineSVGOfASoak(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	h := &history{Seed: 1, Mode: "witness", Nodes: []string{"node-a", "node-b", "witness"}, Start: start}
	rng := rand.New(rand.NewPCG(3, 300))
	at := start
	kinds := []string{"partition", "kill", "pause", "disk-full", "clock-skew"}
	for i := 0; i < 300; i++ {
		at = at.Add(time.Duration(1+rng.IntN(5)) * time.Second)
		h.Events = append(h.Events, faultEvent{Round: i, Kind: kinds[rng.IntN(len(kinds))], Targets: []string{h.Nodes[rng.IntN(3)]}, Start: at, Healed: at.Add(time.Second)})
		for _, n := range h.Nodes {
			h.Samples = append(h.Samples, roleSample{Node: n, Send: at, OK: true, Role: map[bool]string{true: "active", false: "standby"}[n == "node-a"]})
		}
	}
	h.End = at.Add(5 * time.Second)
	rep := &report{Rounds: 300, DurationText: "15m", hist: h}
	svg := rep.svg()
	if strings.Contains(svg, "rotate(") {
		t.Fatal("the timeline still rotates fault labels")
	}
	if n := strings.Count(svg, `fill="#b71c1c" font-size="9"`); n != 300 {
		t.Fatalf("%d fault labels in the picture, want 300", n)
	}
	if path := os.Getenv("SCADAD_TIMELINE_SVG"); path != "" {
		if err := os.WriteFile(path, []byte(svg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
