package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/subscribe"
)

// params are the scenario; every duration is given at scale 1 and scaled by d.
type params struct {
	scale       float64
	instances   int
	tags        int
	cost        time.Duration
	perTag      time.Duration
	deadline    time.Duration
	change      time.Duration
	redeploys   int
	redeployGap time.Duration
	settle      time.Duration
	wedge       time.Duration
	unanswered  time.Duration
}

func (p params) d(x time.Duration) time.Duration { return time.Duration(float64(x) * p.scale) }

// real converts a measured wall duration back to scale-1 seconds.
func (p params) real(x time.Duration) float64 { return x.Seconds() / p.scale }

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	p := params{}
	fs.Float64Var(&p.scale, "timescale", 0.1, "multiply every duration by this (1 = the incident's real timing)")
	fs.IntVar(&p.instances, "instances", 2, "instances on the connection")
	fs.IntVar(&p.tags, "tags", 244, "tags per instance")
	fs.DurationVar(&p.cost, "cost", 120*time.Millisecond, "gateway apartment time per command (scale 1)")
	fs.DurationVar(&p.perTag, "per-tag-cost", 2*time.Millisecond, "apartment time per tag in bulk commands (scale 1)")
	fs.DurationVar(&p.deadline, "deadline", 30*time.Second, "gateway per-command deadline (scale 1)")
	fs.DurationVar(&p.change, "change", time.Second, "value change interval (scale 1)")
	fs.IntVar(&p.redeploys, "redeploys", 5, "redeploys in the burst")
	fs.DurationVar(&p.redeployGap, "redeploy-gap", 2*time.Second, "time between redeploys (scale 1)")
	fs.DurationVar(&p.settle, "window", 120*time.Second, "how long to wait for all tags Good after a disturbance (scale 1)")
	fs.DurationVar(&p.wedge, "wedge", 60*time.Second, "gateway wedge length (scale 1)")
	fs.DurationVar(&p.unanswered, "unanswered", 110*time.Second, "how long subscribe replies are dropped (scale 1)")
	modes := fs.String("modes", "legacy,scadad", "comma list of legacy, scadad, scadad-oldgw")
	verbose := fs.Bool("v", false, "log the clients and workers to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if p.scale <= 0 {
		return errors.New("-timescale must be > 0")
	}
	log := zerolog.Nop()
	if *verbose {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger()
	}
	var results []result
	for _, m := range strings.Split(*modes, ",") {
		fmt.Fprintf(os.Stderr, "storm: running %s at timescale %g ...\n", m, p.scale)
		r, err := runMode(p, strings.TrimSpace(m), log)
		if err != nil {
			return fmt.Errorf("mode %s: %w", m, err)
		}
		results = append(results, r)
	}
	report(out, p, results)
	return nil
}

// result holds one mode's figures; durations are scale-1 seconds, -1 = not
// reached within the window.
type result struct {
	mode                 string
	commandsPerSubscribe int64
	commandKinds         string
	initialGood          float64
	burstPeakOps         int
	burstPeakCmds        int64
	burstDeadline        int64
	burstCommands        int64
	burstOps             int
	burstGood            float64
	wedgeDeadline        int64
	wedgeGood            float64
	unansweredOps        int
	floor                float64
}

func instances(p params) []subscribe.InstanceConfig {
	var out []subscribe.InstanceConfig
	for i := range p.instances {
		in := subscribe.InstanceConfig{Name: fmt.Sprintf("Z2806%d", i+1), Connection: "mx1"}
		for j := range p.tags {
			in.Attributes = append(in.Attributes, subscribe.Attribute{Name: fmt.Sprintf("A%03d", j), Tag: fmt.Sprintf("%s.A%03d", in.Name, j)})
		}
		out = append(out, in)
	}
	return out
}

func newSim(p params, caps []string) (*sim.Sim, string, error) {
	s := sim.New(sim.Config{
		Capabilities: caps, DefaultCommandTimeout: p.d(p.deadline), MaxCommandTimeout: p.d(p.deadline),
		CommandCost: p.d(p.cost), PerTagCost: p.d(p.perTag), ChangeInterval: p.d(p.change),
		// A ping is a no-op on the apartment: it waits its turn but costs ~nothing.
		CostByKind: map[string]time.Duration{gateway.KindPing: p.d(time.Millisecond)},
	})
	addr, err := s.Start("127.0.0.1:0")
	return s, addr, err
}

func newSite(p params, mode, addr string, s *sink, log zerolog.Logger) (site, error) {
	if mode == "legacy" {
		return newLegacySite(p, addr, s, log)
	}
	return newScadadSite(p, addr, s, log)
}

func capsFor(mode string) ([]string, error) {
	switch mode {
	case "legacy", "scadad-oldgw":
		return sim.OldCapabilities(), nil
	case "scadad":
		return sim.NewCapabilities(), nil
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

func subscribeCommands(st sim.Stats) (total int64, kinds string) {
	var parts []string
	for _, k := range []string{gateway.KindSubscribeBulk, gateway.KindAddItemBulk, gateway.KindAdviseSupervisory, gateway.KindAdviseItemBulk} {
		if n := st.Commands[k]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return total, strings.Join(parts, " + ")
}

func runMode(p params, mode string, log zerolog.Logger) (result, error) {
	r := result{mode: mode, floor: 5}
	caps, err := capsFor(mode)
	if err != nil {
		return r, err
	}
	insts := instances(p)

	// 1. Cost of one subscribe on a quiet gateway: one instance, one call.
	{
		s, addr, err := newSim(params{scale: 0, change: 0}, caps)
		if err != nil {
			return r, err
		}
		c, err := gateway.New(gateway.Config{Endpoint: addr, Logger: log})
		if err != nil {
			s.Stop()
			return r, err
		}
		done := make(chan struct{})
		ctx, cancel := contextWithCancel()
		go func() { defer close(done); _ = c.Run(ctx) }()
		until(10*time.Second, func() bool { return c.State().Good })
		tags := make([]string, p.tags)
		for i, a := range insts[0].Attributes {
			tags[i] = a.Tag
		}
		if _, err := c.SubscribeTags(ctx, tags); err != nil {
			cancel()
			<-done
			s.Stop()
			return r, fmt.Errorf("quiet subscribe: %w", err)
		}
		r.commandsPerSubscribe, r.commandKinds = subscribeCommands(s.Stats())
		cancel()
		<-done
		_ = c.Close()
		s.Stop()
	}

	// 2–3. Deploy, redeploy burst, wedge: one gateway, one site.
	s, addr, err := newSim(p, caps)
	if err != nil {
		return r, err
	}
	defer s.Stop()
	snk := newSink()
	st, err := newSite(p, mode, addr, snk, log)
	if err != nil {
		return r, err
	}
	defer st.close()
	window := p.d(p.settle)

	began := time.Now()
	if err := st.deploy(insts); err != nil {
		return r, err
	}
	r.initialGood = measureGood(p, began, window, snk, insts)

	s.ResetStats()
	st.ops().reset()
	for i := range p.redeploys {
		if err := st.undeploy(); err != nil {
			return r, err
		}
		snk.forget(insts)
		if err := st.deploy(insts); err != nil {
			return r, err
		}
		if i < p.redeploys-1 {
			time.Sleep(p.d(p.redeployGap))
		}
	}
	r.burstGood = measureGood(p, time.Now(), window, snk, insts)
	stats := s.Stats()
	r.burstDeadline = stats.DeadlineExceeded
	r.burstPeakCmds = stats.PeakSubscribeInFlight
	r.burstCommands, _ = subscribeCommands(stats)
	r.burstOps, r.burstPeakOps = st.ops().snapshot()

	// Wedge the gateway; the incident's redeploy lands inside the wedge.
	s.ResetStats()
	s.Wedge(p.d(p.wedge))
	wedgeEnd := time.Now().Add(p.d(p.wedge))
	time.Sleep(p.d(5 * time.Second))
	if err := st.undeploy(); err != nil {
		return r, err
	}
	snk.forget(insts)
	if err := st.deploy(insts); err != nil {
		return r, err
	}
	time.Sleep(time.Until(wedgeEnd))
	r.wedgeGood = measureGood(p, wedgeEnd, window, snk, insts)
	r.wedgeDeadline = s.Stats().DeadlineExceeded
	_ = st.undeploy()

	// 4. A subscribe that is never answered, on a fresh gateway: one instance.
	s2, addr2, err := newSim(p, caps)
	if err != nil {
		return r, err
	}
	defer s2.Stop()
	st2, err := newSite(p, mode, addr2, newSink(), log)
	if err != nil {
		return r, err
	}
	defer st2.close()
	s2.DropReplies(p.d(p.unanswered), gateway.KindSubscribeBulk, gateway.KindAddItemBulk)
	st2.ops().reset()
	if err := st2.deploy(insts[:1]); err != nil {
		return r, err
	}
	time.Sleep(p.d(p.unanswered) - p.d(time.Second/2))
	st2Stats := s2.Stats()
	r.unansweredOps = int(st2Stats.Commands[gateway.KindSubscribeBulk] + st2Stats.Commands[gateway.KindAddItemBulk])
	return r, nil
}

// measureGood waits up to window for every tag to be Good and returns the
// scale-1 seconds from since, or -1.
func measureGood(p params, since time.Time, window time.Duration, s *sink, insts []subscribe.InstanceConfig) float64 {
	if !until(window, func() bool { return s.allGood(insts) }) {
		return -1
	}
	return p.real(time.Since(since))
}

func secs(x float64) string {
	if x < 0 {
		return "not within window"
	}
	return fmt.Sprintf("%.1f s", x)
}

func report(out io.Writer, p params, rs []result) {
	fmt.Fprintf(out, "subscribe-storm benchmark — timescale %g (figures below are converted back to scale 1, i.e. incident seconds; wall time is × %g)\n", p.scale, p.scale)
	fmt.Fprintf(out, "scenario: 1 connection, %d instances × %d tags; gateway: one apartment, %s/command + %s/tag, deadline %s, values change every %s;\n",
		p.instances, p.tags, p.cost, p.perTag, p.deadline, p.change)
	fmt.Fprintf(out, "          burst of %d redeploys %s apart; %s wedge with a redeploy inside it; window %s; subscribe replies dropped for %s\n\n",
		p.redeploys, p.redeployGap, p.wedge, p.settle, p.unanswered)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "metric")
	for _, r := range rs {
		fmt.Fprintf(tw, "\t%s", r.mode)
	}
	fmt.Fprintln(tw)
	row := func(name string, f func(result) string) {
		fmt.Fprint(tw, name)
		for _, r := range rs {
			fmt.Fprintf(tw, "\t%s", f(r))
		}
		fmt.Fprintln(tw)
	}
	row("gateway commands per subscribe (quiet gateway)", func(r result) string {
		return fmt.Sprintf("%d (%s)", r.commandsPerSubscribe, r.commandKinds)
	})
	row("initial deploy: time to all tags Good", func(r result) string { return secs(r.initialGood) })
	row("burst: subscribe calls sent", func(r result) string { return fmt.Sprint(r.burstOps) })
	row("burst: subscribe-kind gateway commands", func(r result) string { return fmt.Sprint(r.burstCommands) })
	row("burst: peak concurrent subscribes per connection", func(r result) string { return fmt.Sprint(r.burstPeakOps) })
	row("burst: peak subscribe commands in flight (gateway)", func(r result) string { return fmt.Sprint(r.burstPeakCmds) })
	row("burst: DeadlineExceeded", func(r result) string { return fmt.Sprint(r.burstDeadline) })
	row("burst: last redeploy → all tags Good (fresh values)", func(r result) string { return secs(r.burstGood) })
	row("wedge: DeadlineExceeded (incl. during the wedge)", func(r result) string { return fmt.Sprint(r.wedgeDeadline) })
	row("wedge end → all tags Good (target ≤ floor 5 s + 1 s)", func(r result) string { return secs(r.wedgeGood) })
	row(fmt.Sprintf("unanswered subscribe for %s: requests reaching the gateway (1 instance)", p.unanswered), func(r result) string { return fmt.Sprint(r.unansweredOps) })
	_ = tw.Flush()
}
