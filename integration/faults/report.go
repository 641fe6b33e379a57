package faults

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// history is everything a run recorded.
type history struct {
	Seed          uint64
	Mode          string
	Network       string
	OverrideAfter time.Duration
	Schedule      []round
	Nodes         []string
	Start, End    time.Time
	Enqueues      []enqueueOp
	CAS           []casOp
	InitialPtr    pointer
	FinalPtr      pointer
	PtrHistory    map[uint64]string
	Samples       []roleSample
	Events        []faultEvent
	Deliveries    []delivery
	Pending       map[string]bool
	Parked        map[string]bool
	// SplitAt is when a pair-mode partition longer than override_after
	// began (zero when none ran).
	SplitAt time.Time
	// Superseded are the contents (sha256) of deploys the heal recorded as
	// made on the losing side of a split and never applied.
	Superseded map[string]bool
}

// dualActive is one interval with two Active nodes, judged by the mode.
type dualActive struct {
	overlap
	LengthText string `json:"length"`
	Allowed    bool   `json:"allowed"`
	Why        string `json:"why"`
	// OutlivedHeal is true when the interval went on after the partition
	// that caused it was healed.
	OutlivedHeal bool `json:"outlived_heal,omitempty"`
}

// report is the suite's result, written as report.json.
type report struct {
	Seed            uint64         `json:"seed"`
	Mode            string         `json:"mode"`
	Network         string         `json:"network"`
	Rounds          int            `json:"rounds"`
	Start           time.Time      `json:"start"`
	DurationText    string         `json:"duration"`
	FaultsByKind    map[string]int `json:"faults_by_kind"`
	Delivery        deliveryResult `json:"delivery"`
	CAS             casResult      `json:"cas"`
	DualActive      []dualActive   `json:"dual_active"`
	Failover        durationStats  `json:"failover"`
	FailoverText    string         `json:"failover_text"`
	FailoverMissing int            `json:"failover_missing"`
	FailoverResumed int            `json:"failover_resumed"` // the old epoch's Active carried on first (a strict-mode pause)
	Unrecovered     int            `json:"unrecovered_rounds"`
	RoleSamples     int            `json:"role_samples"`
	Problems        []string       `json:"problems"`
	Events          []faultEvent   `json:"events"`
	Schedule        []round        `json:"schedule"`
	Notes           []string       `json:"notes,omitempty"`
	spans           []activeSpan   `json:"-"`
	hist            *history       `json:"-"`
}

// analyze runs every checker over h.
func analyze(h *history, casTimeout time.Duration) *report {
	rep := &report{
		Seed: h.Seed, Mode: h.Mode, Network: h.Network, Start: h.Start,
		DurationText: h.End.Sub(h.Start).Round(time.Second).String(),
		FaultsByKind: map[string]int{}, Events: h.Events, Schedule: h.Schedule,
		RoleSamples: len(h.Samples), hist: h,
	}
	rounds := map[int]bool{}
	for _, ev := range h.Events {
		rounds[ev.Round] = true
		rep.FaultsByKind[ev.Kind]++
		if ev.Recovered.IsZero() {
			rep.Unrecovered++
			rep.Problems = append(rep.Problems, fmt.Sprintf("round %d (%s): the cluster did not recover: %s", ev.Round, ev.Kind, ev.Note))
		}
	}
	rep.Rounds = len(rounds)

	rep.Delivery = checkDeliveries(h.Enqueues, h.Deliveries, h.Pending, h.Parked)
	if rep.Delivery.Lost > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d acknowledged messages lost, e.g. %v", rep.Delivery.Lost, firstN(rep.Delivery.LostIDs, 5)))
	}
	if rep.Delivery.Foreign > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d deliveries with an id no client sent or a body not sent under that id, e.g. %v", rep.Delivery.Foreign, firstN(rep.Delivery.ForeignIDs, 5)))
	}

	// A split pair has two registers by design: a push acknowledged by the
	// side that lost the heal is recorded there as superseded, not applied.
	// It leaves the check, but only if it returned during the split.
	var ops []casOp
	for _, op := range h.CAS {
		if !op.Read && op.Outcome == outcomeOK && h.Superseded[op.SHA] {
			if h.SplitAt.IsZero() || op.Return.Before(h.SplitAt) {
				rep.Problems = append(rep.Problems, fmt.Sprintf("push of %.12s acknowledged as revision %d before any split, yet superseded by a heal", op.SHA, op.Revision))
			}
			rep.CAS.SupersededByHeal++
			continue
		}
		ops = append(ops, op)
	}
	acked := append([]casOp(nil), ops...)
	if h.FinalPtr.SHA != "" {
		// The final read, after every operation returned and the cluster
		// settled: the register must end where the pushes left it.
		t := h.End
		ops = append(ops, casOp{Client: 1 << 20, Read: true, Invoke: t, Return: t, Revision: h.FinalPtr.Rev, SHA: h.FinalPtr.SHA, Outcome: outcomeOK})
	}
	superseded := rep.CAS.SupersededByHeal
	rep.CAS, _ = checkCAS(h.InitialPtr, ops, casTimeout)
	rep.CAS.SupersededByHeal = superseded
	if h.PtrHistory != nil {
		rep.CAS.HistoryProblems = checkPointerHistory(h.InitialPtr, acked, h.PtrHistory)
	} else {
		rep.Notes = append(rep.Notes, "the final deploy history could not be read; pushes not cross-checked against it")
	}
	if rep.CAS.Linearizable == "Illegal" {
		rep.Problems = append(rep.Problems, "deploy pointer history is not linearizable")
	}
	rep.Problems = append(rep.Problems, rep.CAS.HistoryProblems...)

	rep.spans = activeSpans(h.Samples)
	for _, o := range activeOverlaps(rep.spans) {
		d := dualActive{overlap: o, LengthText: o.Length.Round(time.Millisecond).String()}
		switch {
		case h.Mode == "pair" && !h.SplitAt.IsZero() && !o.From.After(healedAt(h.Events).Add(time.Second)) && !o.From.Before(h.SplitAt.Add(h.OverrideAfter)):
			d.Allowed, d.Why = true, "pair mode, under a partition that outlasted override_after"
			if o.SameEpoch {
				d.Why += "; BOTH SIDES CARRY EPOCH " + o.EpochA
				rep.Notes = append(rep.Notes, fmt.Sprintf("finding: the two sides of the pair split were Active under the same epoch %s: each override bumped the cluster epoch to the same value, so the fencing epoch on deliveries cannot tell the sides apart", o.EpochA))
			}
			for _, ev := range h.Events {
				if ev.Kind == faultPairLong && o.From.Add(o.Length).After(ev.Healed.Add(2*time.Second)) {
					d.OutlivedHeal = true
				}
			}
		case o.SameEpoch:
			d.Why = "two nodes Active under the same epoch"
		case h.Mode == "pair" && !h.SplitAt.IsZero() && o.From.After(healedAt(h.Events).Add(time.Second)):
			d.Why = fmt.Sprintf("pair mode: became dual-active %s AFTER the partition healed (an override completed while the peer answered)", o.From.Sub(healedAt(h.Events)).Round(time.Millisecond))
		case h.Mode == "pair":
			d.Why = "pair mode, but no partition had outlasted override_after"
		default:
			d.Why = "mode " + h.Mode + " must never be dual-active"
		}
		rep.DualActive = append(rep.DualActive, d)
		if !d.Allowed {
			rep.Problems = append(rep.Problems, fmt.Sprintf("dual-active %s and %s (epochs %s, %s) for %s from %s: %s",
				o.A, o.B, o.EpochA, o.EpochB, d.LengthText, o.From.Format("15:04:05.000"), d.Why))
		}
		if d.OutlivedHeal {
			rep.Notes = append(rep.Notes, fmt.Sprintf("pair split %s/%s stayed dual-active %s after the partition healed (a split that does not heal at all fails the round)", o.A, o.B, o.From.Add(o.Length).Sub(healedAt(h.Events)).Round(time.Millisecond)))
		}
	}

	var fos []time.Duration
	for i, ev := range h.Events {
		if !ev.NeedsFailover || ev.EpochBefore == "" {
			continue
		}
		// A later round's failover is not this one's: look no further
		// than the next round's start.
		end := ev.Start.Add(60 * time.Second)
		if next := nextRoundStart(h.Events, ev.Round); !next.IsZero() && next.Before(end) {
			end = next
		}
		d, ok := failoverTime(h.Samples, ev.EpochBefore, ev.Start, end)
		if !ok {
			if !ev.Healed.IsZero() && activeIn(h.Samples, ev.EpochBefore, ev.Healed, end) {
				rep.FailoverResumed++
			} else {
				rep.FailoverMissing++
			}
			continue
		}
		dd := d
		rep.Events[i].Failover = &dd
		fos = append(fos, d)
	}
	rep.Failover = summarize(fos)
	rep.FailoverText = rep.Failover.String()
	return rep
}

// nextRoundStart is when the first fault of a round after round began,
// zero if none did (the faults of one round start microseconds apart).
func nextRoundStart(evs []faultEvent, round int) time.Time {
	var next time.Time
	for _, ev := range evs {
		if ev.Round > round && (next.IsZero() || ev.Start.Before(next)) {
			next = ev.Start
		}
	}
	return next
}

func healedAt(evs []faultEvent) time.Time {
	for _, ev := range evs {
		if ev.Kind == faultPairLong {
			return ev.Healed
		}
	}
	return time.Time{}
}

func firstN(xs []string, n int) []string {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}

// summary is the short human-readable result.
func (rep *report) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "faults suite: mode=%s seed=%d rounds=%d duration=%s\n", rep.Mode, rep.Seed, rep.Rounds, rep.DurationText)
	fmt.Fprintf(&b, "network: %s\n", rep.Network)
	kinds := make([]string, 0, len(rep.FaultsByKind))
	for k := range rep.FaultsByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, rep.FaultsByKind[k]))
	}
	fmt.Fprintf(&b, "faults: %s\n", strings.Join(parts, " "))
	d := rep.Delivery
	fmt.Fprintf(&b, "s&f: attempted=%d acked=%d delivered=%d pending=%d parked=%d LOST=%d duplicates=%d (over %d ids) foreign=%d unacked-but-delivered=%d\n",
		d.Attempted, d.Acked, d.Delivered, d.Pending, d.Parked, d.Lost, d.Duplicates, d.DupIDs, d.Foreign, d.UnackedDelivered)
	c := rep.CAS
	fmt.Fprintf(&b, "deploy CAS: ops=%d ok=%d mismatch=%d unknown=%d superseded-by-heal=%d linearizable=%s violations=%d history-problems=%d\n",
		c.Ops, c.OK, c.Mismatch, c.Unknown, c.SupersededByHeal, c.Linearizable, c.Violations, len(c.HistoryProblems))
	allowed, bad := 0, 0
	for _, da := range rep.DualActive {
		if da.Allowed {
			allowed++
		} else {
			bad++
		}
	}
	fmt.Fprintf(&b, "dual-active intervals: %d allowed, %d violations\n", allowed, bad)
	for _, da := range rep.DualActive {
		fmt.Fprintf(&b, "  %s+%s %s (%s)\n", da.A, da.B, da.LengthText, da.Why)
	}
	fmt.Fprintf(&b, "failover: %s; missing=%d; resumed without failover=%d; rounds without recovery=%d; role samples=%d\n", rep.FailoverText, rep.FailoverMissing, rep.FailoverResumed, rep.Unrecovered, rep.RoleSamples)
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if len(rep.Problems) == 0 {
		b.WriteString("result: PASS\n")
	} else {
		b.WriteString("result: FAIL\n")
		for _, p := range rep.Problems {
			fmt.Fprintf(&b, "  problem: %s\n", p)
		}
	}
	return b.String()
}

// write puts report.json, summary.txt and timeline.svg in dir.
func (rep *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), data, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(rep.summary()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "timeline.svg"), []byte(rep.svg()), 0o644)
}

var roleColors = map[string]string{
	"active": "#2e7d32", "standby": "#1565c0", "witness": "#8d8d8d", "detached": "#ef6c00", "": "#e0e0e0",
}

// svg draws one row per node: its role over time (grey = no answer), the
// deliveries made under the epochs it led (bars below), and the faults as
// red bands with their names.
func (rep *report) svg() string {
	h := rep.hist
	const left, rowH, top = 90.0, 46.0, 40.0
	span := h.End.Sub(h.Start).Seconds()
	if span <= 0 {
		span = 1
	}
	// At least pxPerSecond: a soak of 300 rounds gets a wide picture to
	// scroll through, not a squeezed one whose faults pile up.
	width := max(1400, span*pxPerSecond)
	x := func(t time.Time) float64 { return left + width*t.Sub(h.Start).Seconds()/span }
	var labels []label
	for _, ev := range h.Events {
		text := ev.Kind
		if len(ev.Targets) > 0 {
			text += " " + strings.Join(ev.Targets, ",")
		}
		labels = append(labels, label{X: x(ev.Start), Width: labelWidth(text), Text: text})
	}
	lanes := layoutLabels(labels)
	height := top + rowH*float64(len(h.Nodes)) + 20 + labelLaneH*float64(lanes) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", left+width+20, height)
	fmt.Fprintf(&b, `<text x="4" y="14">seed %d, mode %s, %d rounds, %s. green=active blue=standby grey=witness orange=detached light=no answer; bars=deliveries per 0.5 s under the node's epochs; red=faults</text>`+"\n", h.Seed, h.Mode, rep.Rounds, rep.DurationText)
	rows := map[string]float64{}
	for i, n := range h.Nodes {
		y := top + rowH*float64(i)
		rows[n] = y
		fmt.Fprintf(&b, `<text x="4" y="%.0f">%s</text>`+"\n", y+14, html.EscapeString(n))
	}
	// Roles: merge consecutive samples of the same role.
	byNode := map[string][]roleSample{}
	for _, s := range h.Samples {
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	for n, ss := range byNode {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Send.Before(ss[j].Send) })
		y := rows[n]
		for i := 0; i < len(ss); {
			role := ""
			if ss[i].OK {
				role = ss[i].Role
			}
			j := i + 1
			for j < len(ss) && ss[j].OK == ss[i].OK && (!ss[j].OK || ss[j].Role == role) {
				j++
			}
			end := h.End
			if j < len(ss) {
				end = ss[j].Send
			}
			color := roleColors[role]
			if color == "" {
				color = "#444"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="18" fill="%s"/>`+"\n", x(ss[i].Send), y, max(x(end)-x(ss[i].Send), 0.5), color)
			i = j
		}
	}
	// Deliveries, attributed to the node that was Active under their epoch.
	leader := map[string]string{}
	for _, sp := range rep.spans {
		leader[sp.Epoch] = sp.Node
	}
	const bucket = 500 * time.Millisecond
	counts := map[string]map[int]int{}
	peak := 1
	for _, d := range h.Deliveries {
		if d.Status < 200 || d.Status > 299 {
			continue
		}
		n := leader[d.Epoch]
		if counts[n] == nil {
			counts[n] = map[int]int{}
		}
		k := int(d.Time.Sub(h.Start) / bucket)
		counts[n][k]++
		peak = max(peak, counts[n][k])
	}
	for n, m := range counts {
		y, ok := rows[n]
		if !ok {
			continue
		}
		for k, c := range m {
			t := h.Start.Add(time.Duration(k) * bucket)
			hh := 20 * float64(c) / float64(peak)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#555"/>`+"\n", x(t), y+42-hh, max(x(t.Add(bucket))-x(t)-0.3, 0.5), hh)
		}
	}
	// Faults.
	bottom := top + rowH*float64(len(h.Nodes))
	for i, ev := range h.Events {
		end := ev.Healed
		if end.IsZero() {
			end = h.End
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="#d32f2f" fill-opacity="0.18"/>`+"\n", x(ev.Start), top-4, max(x(end)-x(ev.Start), 1), bottom-top+4)
		// Each label sits in the lane layoutLabels gave it, with a tick
		// from the fault's start down to it.
		l := labels[i]
		y := bottom + 20 + labelLaneH*float64(l.Lane)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#b71c1c" stroke-width="0.5" stroke-opacity="0.5"/>`+"\n", l.X, l.X, bottom, y-8)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" fill="#b71c1c" font-size="9"><title>%s</title>%s</text>`+"\n", l.X, y, html.EscapeString(l.Text), html.EscapeString(l.Text))
	}
	// Time axis every 10 s.
	for s := 0.0; s <= span; s += 10 {
		t := h.Start.Add(time.Duration(s * float64(time.Second)))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#bbb" stroke-width="0.5"/><text x="%.1f" y="%.0f" fill="#777" font-size="9">%.0fs</text>`+"\n", x(t), x(t), top-8, bottom, x(t)+2, top-10, s)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// pxPerSecond is the timeline's least horizontal scale: 10 s between axis
// ticks is then 40 px, room for their labels.
const pxPerSecond = 4.0

// labelLaneH is the height of one lane of fault labels (font size 9).
const labelLaneH = 11.0

// label is one fault's name on the timeline: it starts at X and is Width
// wide; layoutLabels sets its Lane.
type label struct {
	X, Width float64
	Text     string
	Lane     int
}

// labelWidth estimates the width of text at font size 9 (sans-serif
// averages well under 0.6 em a character; 0.62 em keeps a margin).
func labelWidth(text string) float64 { return float64(len([]rune(text)))*9*0.62 + 4 }

// layoutLabels puts each label in the first lane (from the top) where it
// starts after the previous label in that lane ends, so no two labels
// overlap however dense the faults; it returns the number of lanes.
func layoutLabels(ls []label) int {
	order := make([]int, len(ls))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ls[order[a]].X < ls[order[b]].X })
	var ends []float64 // per lane, where its last label ends
	for _, i := range order {
		l := &ls[i]
		l.Lane = -1
		for lane, end := range ends {
			if l.X >= end {
				l.Lane = lane
				break
			}
		}
		if l.Lane < 0 {
			l.Lane = len(ends)
			ends = append(ends, 0)
		}
		ends[l.Lane] = l.X + l.Width
	}
	return len(ends)
}
