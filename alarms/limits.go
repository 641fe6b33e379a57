package alarms

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/internal/numeric"
)

// Limit levels, the condition states of an exclusive limit alarm.
const (
	LevelNormal = "Normal"
	LevelHiHi   = "HiHi"
	LevelHi     = "Hi"
	LevelLo     = "Lo"
	LevelLoLo   = "LoLo"
)

// Threshold is one limit level: it is in alarm at or beyond Limit.
type Threshold struct {
	Limit    float64
	Severity uint32
}

// Limit is one limit alarm on a numeric attribute (the site config's
// alarms.limits): an exclusive limit alarm, in at most one of its levels.
type Limit struct {
	// ID names the alarm; Instance is its source.
	ID                 string
	Instance           string
	Attribute          string
	HiHi, Hi, Lo, LoLo *Threshold
	// Deadband is how far back past a limit a value must come to leave
	// the level (hysteresis).
	Deadband float64
	// OnDelay is how long a level must hold before the alarm enters it.
	OnDelay time.Duration
	Message string
}

func (l Limit) validate() error {
	if l.ID == "" || l.Instance == "" || l.Attribute == "" {
		return errors.New("limit alarm: id, instance and attribute are required")
	}
	if l.HiHi == nil && l.Hi == nil && l.Lo == nil && l.LoLo == nil {
		return fmt.Errorf("limit alarm %q: no levels", l.ID)
	}
	if l.Deadband < 0 || l.OnDelay < 0 {
		return fmt.Errorf("limit alarm %q: negative deadband or on-delay", l.ID)
	}
	var prev *float64
	for _, t := range []*Threshold{l.LoLo, l.Lo, l.Hi, l.HiHi} {
		if t == nil {
			continue
		}
		if t.Severity < 1 || t.Severity > 1000 {
			return fmt.Errorf("limit alarm %q: severity %d outside 1..1000", l.ID, t.Severity)
		}
		if prev != nil && t.Limit <= *prev {
			return fmt.Errorf("limit alarm %q: levels must rise lo_lo < lo < hi < hi_hi", l.ID)
		}
		v := t.Limit
		prev = &v
	}
	return nil
}

// limitState is one limit alarm's warm evaluation state.
type limitState struct {
	def Limit
	// level is the level the alarm is in; pending is a level the value is
	// in but that has not yet held for the on-delay.
	level        string
	pending      string
	pendingSince time.Time
	seen         bool
}

// limitEvaluator evaluates limit alarms from tag values, on every node.
type limitEvaluator struct {
	clock clock.Clock
	emit  func(*fsmpb.AlarmCondition)

	mu     sync.Mutex
	byAttr map[[2]string][]*limitState
	byID   map[string]*limitState
	wake   chan struct{}
}

func newLimitEvaluator(c clock.Clock, emit func(*fsmpb.AlarmCondition)) *limitEvaluator {
	return &limitEvaluator{clock: c, emit: emit, byAttr: map[[2]string][]*limitState{}, byID: map[string]*limitState{}, wake: make(chan struct{}, 1)}
}

// set replaces the limit alarms; one whose definition did not change keeps
// its state.
func (e *limitEvaluator) set(limits []Limit) error {
	ids := map[string]bool{}
	for _, l := range limits {
		if err := l.validate(); err != nil {
			return err
		}
		if ids[l.ID] {
			return fmt.Errorf("limit alarm %q defined twice", l.ID)
		}
		ids[l.ID] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	byAttr := map[[2]string][]*limitState{}
	byID := map[string]*limitState{}
	for _, l := range limits {
		st := e.byID[l.ID]
		if st == nil || !sameLimit(st.def, l) {
			st = &limitState{def: l, level: LevelNormal}
		}
		k := [2]string{l.Instance, l.Attribute}
		byAttr[k] = append(byAttr[k], st)
		byID[l.ID] = st
	}
	e.byAttr, e.byID = byAttr, byID
	return nil
}

func sameLimit(a, b Limit) bool {
	eq := func(x, y *Threshold) bool { return (x == nil && y == nil) || (x != nil && y != nil && *x == *y) }
	return a.ID == b.ID && a.Instance == b.Instance && a.Attribute == b.Attribute && eq(a.HiHi, b.HiHi) && eq(a.Hi, b.Hi) &&
		eq(a.Lo, b.Lo) && eq(a.LoLo, b.LoLo) && a.Deadband == b.Deadband && a.OnDelay == b.OnDelay && a.Message == b.Message
}

// update evaluates a new value of an attribute. A value that is not a
// finite number (or of bad quality) leaves the state as it is.
func (e *limitEvaluator) update(instance, attribute string, v any, good bool) {
	f, ok := numeric.Float(v)
	if !good || !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return
	}
	now := e.clock.Now()
	var out []*fsmpb.AlarmCondition
	pending := false
	e.mu.Lock()
	for _, st := range e.byAttr[[2]string{instance, attribute}] {
		st.seen = true
		target := st.def.levelFor(f, st.level)
		if c := st.step(target, now); c != nil {
			out = append(out, c)
		}
		pending = pending || st.pending != ""
	}
	e.mu.Unlock()
	for _, c := range out {
		e.emit(c)
	}
	if pending {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// levelFor is the level value f is in, given the current level (the
// deadband holds a level until the value is back past it).
func (l Limit) levelFor(f float64, current string) string {
	in := func(t *Threshold, name string, high bool) bool {
		if t == nil {
			return false
		}
		limit := t.Limit
		if current == name || (high && current == LevelHiHi && name == LevelHi) || (!high && current == LevelLoLo && name == LevelLo) {
			if high {
				limit -= l.Deadband
			} else {
				limit += l.Deadband
			}
		}
		if high {
			return f >= limit
		}
		return f <= limit
	}
	switch {
	case in(l.HiHi, LevelHiHi, true):
		return LevelHiHi
	case in(l.Hi, LevelHi, true):
		return LevelHi
	case in(l.LoLo, LevelLoLo, false):
		return LevelLoLo
	case in(l.Lo, LevelLo, false):
		return LevelLo
	}
	return LevelNormal
}

// step moves the state towards target at now and returns the condition to
// report when the alarm's level changed. Leaving a level is at once; a
// new level must hold for the on-delay.
func (st *limitState) step(target string, now time.Time) *fsmpb.AlarmCondition {
	switch {
	case target == st.level:
		st.pending = ""
		return nil
	case target == LevelNormal || st.def.OnDelay == 0:
		st.pending = ""
		st.level = target
		return st.condition(now)
	case st.pending != target:
		st.pending, st.pendingSince = target, now
		return nil
	case now.Sub(st.pendingSince) >= st.def.OnDelay:
		st.pending = ""
		st.level = target
		return st.condition(now)
	}
	return nil
}

func (st *limitState) condition(now time.Time) *fsmpb.AlarmCondition {
	d := st.def
	// The level's severity; a Normal condition keeps the severity of the
	// mildest level it has.
	var sev uint32
	for _, x := range []struct {
		name string
		t    *Threshold
	}{{LevelHi, d.Hi}, {LevelLo, d.Lo}, {LevelHiHi, d.HiHi}, {LevelLoLo, d.LoLo}} {
		if x.t == nil {
			continue
		}
		if sev == 0 || x.name == st.level {
			sev = x.t.Severity
		}
	}
	msg := d.Message
	if msg == "" {
		msg = fmt.Sprintf("%s.%s", d.Instance, d.Attribute)
	}
	if st.level != LevelNormal {
		msg = fmt.Sprintf("%s: %s", msg, st.level)
	}
	return &fsmpb.AlarmCondition{
		AlarmId: d.ID, Source: d.Instance, ConditionName: d.ID, Severity: sev, Message: msg,
		Active: st.level != LevelNormal, ConditionState: st.level, TransitionUnixNano: now.UnixNano(), Kind: KindLimit,
	}
}

// conditions returns the current condition of every limit alarm that has
// seen a value (for a node becoming Active to record what it evaluated).
func (e *limitEvaluator) conditions() []*fsmpb.AlarmCondition {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	var out []*fsmpb.AlarmCondition
	for _, st := range e.byID {
		if st.seen {
			out = append(out, st.condition(now))
		}
	}
	return out
}

// run completes on-delays that elapse without a new value.
func (e *limitEvaluator) run(ctx context.Context) {
	for {
		e.mu.Lock()
		var next time.Duration = -1
		now := e.clock.Now()
		var out []*fsmpb.AlarmCondition
		for _, st := range e.byID {
			if st.pending == "" {
				continue
			}
			if c := st.step(st.pending, now); c != nil {
				out = append(out, c)
				continue
			}
			if left := st.def.OnDelay - now.Sub(st.pendingSince); next < 0 || left < next {
				next = left
			}
		}
		e.mu.Unlock()
		for _, c := range out {
			e.emit(c)
		}
		var timer <-chan time.Time
		if next >= 0 {
			timer = e.clock.After(next)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		case <-timer:
		}
	}
}

// TagUpdate evaluates the limit alarms of an attribute; every node calls
// it with the values it reads.
func (s *Service) TagUpdate(instance, attribute string, v any, good bool) {
	s.limits.update(instance, attribute, v, good)
}

// RecordEvaluated proposes the current evaluation of every limit alarm;
// a node that has just become Active calls it (the state then matches what
// it evaluated while it was Standby; unchanged alarms make no transition).
func (s *Service) RecordEvaluated() {
	if _, ok, _ := s.active(); !ok {
		return
	}
	if conds := s.limits.conditions(); len(conds) > 0 {
		s.enqueue(observation{conds: conds})
	}
}
