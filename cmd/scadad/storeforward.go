package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/control"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/internal/netguard"
	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/siteconfig"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/storeforward/mqtttarget"
	"github.com/scadad/scadad/storeforward/pgtarget"
)

// sfService joins the store-and-forward parts for the control API.
type sfService struct {
	nodeID   string
	enqueuer *storeforward.Enqueuer
	deliver  *storeforward.Deliverer
	op       *storeforward.Operator
	metrics  *storeforward.Metrics // shared with the history forwarder
}

// sfRemoveDelay gathers delivered ids for 20 ms before removing them: at
// thousands of deliveries a second, one removal entry per 20 ms instead of
// one per commit round trip (a few ms) leaves the CPU to delivery.
const sfRemoveDelay = 20 * time.Millisecond

// startStoreForward builds the enqueuer and the deliverer, follows the
// site config's targets, and runs delivery (which itself follows the role).
func startStoreForward(ctx context.Context, cfg *nodeconfig.Config, log zerolog.Logger, reg prometheus.Registerer, state *fsm.FSM, fwd *control.Forwarder, roles role.Source, holder *siteconfig.Holder, bodies *netguard.BodyBudget, goRun func(string, func(context.Context) error)) (*sfService, fasthttp.RequestHandler, error) {
	metrics, err := storeforward.NewMetrics(reg, state)
	if err != nil {
		return nil, nil, fmt.Errorf("store-and-forward metrics: %w", err)
	}
	sfLog := log.With().Str("part", "storeforward").Logger()
	deliverer, err := storeforward.NewDeliverer(storeforward.DelivererOptions{
		Reader: state, Proposer: fwd, Roles: roles, Actor: cfg.NodeID, Logger: sfLog, Metrics: metrics,
		RemoveDelay: sfRemoveDelay,
		Kinds:       map[string]storeforward.Kind{pgtarget.Name: pgtarget.Kind{}, mqtttarget.Name: mqtttarget.Kind{}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store-and-forward delivery: %w", err)
	}
	enq, err := storeforward.NewEnqueuer(storeforward.EnqueuerOptions{
		Proposer: fwd, Targets: deliverer, Counts: state, Actor: cfg.NodeID,
		MaxBatchMessages: cfg.SF.BatchMaxMessages, MaxDelay: cfg.SF.BatchDelay.D(), MaxInFlight: cfg.SF.BatchMaxInFlight,
		Logger: sfLog, Metrics: metrics, Bodies: bodies,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store-and-forward enqueue: %w", err)
	}
	goRun("storeforward-delivery", deliverer.Run)
	goRun("storeforward-targets", func(ctx context.Context) error {
		followSite(ctx, holder, func(u siteconfig.Update) {
			if err := deliverer.SetTargets(sfTargets(u.Site)); err != nil {
				sfLog.Error().Err(err).Uint64("revision", uint64(u.Revision)).Msg("store-and-forward targets of the new site config refused; keeping the previous ones")
			}
		})
		return nil
	})
	goRun("storeforward-enqueuer", func(ctx context.Context) error {
		<-ctx.Done()
		enq.Close()
		return nil
	})
	// Retry and discard through the Standby show in its `sf list` at once.
	seen := control.SeenLocally{Proposer: fwd, Applied: state}
	op, err := storeforward.NewOperator(storeforward.OperatorOptions{Reader: state, Proposer: seen, Targets: deliverer, Live: deliverer, Actor: "operator@" + cfg.NodeID})
	if err != nil {
		return nil, nil, fmt.Errorf("store-and-forward operator: %w", err)
	}
	return &sfService{nodeID: cfg.NodeID, enqueuer: enq, deliver: deliverer, op: op, metrics: metrics}, enq.Handler(), nil
}

func sfTargets(s *siteconfig.Site) []storeforward.Target {
	var out []storeforward.Target
	for _, t := range s.Targets {
		if t.MaxAttempts == 0 {
			// The site config's 0 means never park (a historian must
			// survive a week-long outage); storeforward's 0 means default.
			t.MaxAttempts = math.MaxInt32
		}
		st := storeforward.Target{
			Name: t.Name, URL: t.URL, Headers: t.Headers, Timeout: t.Timeout,
			BackoffFloor: t.BackoffFloor, BackoffMax: t.BackoffMax,
			MaxAttempts: t.MaxAttempts, MaxPayloadBytes: t.MaxPayloadBytes, MaxInFlight: t.MaxInFlight,
			CAFile: t.CAFile, MaxPending: t.MaxPending, ParkOn: t.ParkOn,
			BatchMaxMessages: t.BatchMaxMessages, BatchMaxBytes: t.BatchMaxBytes, BatchFormat: t.BatchFormat,
		}
		if t.Kind == siteconfig.TargetPostgres && t.Postgres != nil {
			st.Kind = pgtarget.Name
			st.Settings = pgtarget.Settings{DSN: t.Postgres.DSN, PasswordFile: t.Postgres.PasswordFile, Table: t.Postgres.Table}
		}
		if m := t.MQTT; t.Kind == siteconfig.TargetMQTT && m != nil {
			st.Kind = mqtttarget.Name
			st.Settings = mqtttarget.Settings{Broker: m.Broker, Topic: m.Topic, Username: m.Username, PasswordFile: m.PasswordFile,
				CAFile: m.CAFile, CertFile: m.CertFile, KeyFile: m.KeyFile, SessionExpiry: m.SessionExpiry, InFlight: m.InFlight}
		}
		out = append(out, st)
	}
	return out
}

// Enqueue stores one message through the group committer: Submit, then
// wait.
func (s *sfService) Enqueue(ctx context.Context, target string, payload []byte, id string) (string, bool, error) {
	return s.Submit(ctx, target, payload, id)(ctx)
}

// Submit hands one message to the group committer; wait answers as
// Enqueue does.
func (s *sfService) Submit(ctx context.Context, target string, payload []byte, id string) func(context.Context) (string, bool, error) {
	p, err := s.enqueuer.Submit(ctx, target, payload, id, nil)
	return func(ctx context.Context) (string, bool, error) {
		if err != nil {
			return p.ID(), false, sfStatus("enqueue", err)
		}
		res, err := p.Wait(ctx)
		if err != nil {
			return res.ID, false, sfStatus("enqueue", err)
		}
		return res.ID, res.Duplicate, nil
	}
}

// sfStatus maps store-and-forward errors to gRPC codes.
func sfStatus(what string, err error) error {
	var unknown *storeforward.UnknownTargetError
	var tooLarge *storeforward.PayloadTooLargeError
	var full *storeforward.TargetFullError
	switch {
	case errors.As(err, &unknown):
		return status.Errorf(codes.NotFound, "sf %s: %v", what, err)
	case errors.As(err, &full):
		return status.Errorf(codes.ResourceExhausted, "sf %s: %v", what, err)
	case errors.As(err, &tooLarge), errors.Is(err, storeforward.ErrInvalid):
		return status.Errorf(codes.InvalidArgument, "sf %s: %v", what, err)
	case status.Code(err) != codes.Unknown:
		return err
	}
	return status.Errorf(codes.Unavailable, "sf %s: %v", what, err)
}

// Stats joins the replicated counts with this node's live delivery figures.
func (s *sfService) Stats(ctx context.Context) ([]*controlpb.SFTargetStats, error) {
	stats, err := s.op.Stats()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "sf stats: %v", err)
	}
	delivery := s.deliver.Status()
	var out []*controlpb.SFTargetStats
	for _, st := range stats {
		ts := &controlpb.SFTargetStats{Target: st.Target, Pending: st.Pending, Parked: st.Parked, DeliveredPerSec: st.DeliveredPerSec, LastError: st.LastError, DeliveredTotal: st.Delivered}
		if !st.OldestEnqueue.IsZero() {
			ts.OldestUnixNano = st.OldestEnqueue.UnixNano()
		}
		t, configured := s.deliver.Target(st.Target)
		if configured {
			ts.MaxPending = uint64(t.MaxPending)
			ts.Kind, ts.Endpoint = targetEndpoint(t)
			ts.BatchMaxMessages, ts.MaxInFlight = int32(t.BatchMaxMessages), int32(t.MaxInFlight)
		}
		ts.State = targetState(configured, slices.Contains(delivery.Workers, st.Target), delivery.Active, st)
		out = append(out, ts)
	}
	return out, nil
}

// targetEndpoint says where a target delivers, without credentials.
func targetEndpoint(t storeforward.Target) (kind, endpoint string) {
	switch set := t.Settings.(type) {
	case mqtttarget.Settings:
		u, err := url.Parse(set.Broker)
		if err != nil {
			return mqtttarget.Name, ""
		}
		return mqtttarget.Name, u.Redacted() + " topic " + set.Topic
	case pgtarget.Settings:
		where := "dsn"
		if u, err := url.Parse(set.DSN); err == nil && u.Host != "" {
			where = u.Host + u.Path
		} else {
			for _, kv := range strings.Fields(set.DSN) {
				if k, v, ok := strings.Cut(kv, "="); ok && (k == "host" || k == "dbname") {
					where += " " + k + "=" + v
				}
			}
		}
		return pgtarget.Name, where + " table " + set.Table
	}
	if u, err := url.Parse(t.URL); err == nil {
		return storeforward.KindHTTP, u.Redacted()
	}
	return storeforward.KindHTTP, ""
}

// targetState is what delivery does for a target on this node.
func targetState(configured, worker, active bool, st storeforward.TargetStatus) string {
	switch {
	case !configured:
		return "not configured (its messages stay in the buffer)"
	case !active:
		return "standby (the Active node delivers)"
	case !worker:
		return "starting"
	case st.LastError != "":
		return "failing"
	case st.Pending > 0:
		return "delivering"
	}
	return "idle"
}

// List reads pending or parked messages from this node's replica.
func (s *sfService) List(ctx context.Context, target string, parked bool, limit int) ([]*controlpb.SFMessage, error) {
	msgs, err := s.op.List(target, parked, limit)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "sf list: %v", err)
	}
	var out []*controlpb.SFMessage
	for _, m := range msgs {
		sm := &controlpb.SFMessage{Id: m.ID, Target: m.Target, Seq: m.Seq, EnqueuedUnixNano: m.EnqueuedAt.UnixNano(), Size: int32(len(m.Payload)),
			ParkReason: m.ParkReason, Attempts: int32(m.Attempts), LastError: m.LastError}
		if !m.LastAttemptAt.IsZero() {
			sm.LastAttemptUnixNano = m.LastAttemptAt.UnixNano()
		}
		out = append(out, sm)
	}
	return out, nil
}

// Retry moves parked messages back to pending.
func (s *sfService) Retry(ctx context.Context, ids []string, allOfTarget string) (int, error) {
	res, err := s.op.Retry(ctx, storeforward.Selection{IDs: ids, AllOfTarget: allOfTarget})
	return moved("retry", res, err)
}

// Discard drops parked messages.
func (s *sfService) Discard(ctx context.Context, ids []string, allOfTarget string) (int, error) {
	res, err := s.op.Discard(ctx, storeforward.Selection{IDs: ids, AllOfTarget: allOfTarget}, "operator discard")
	return moved("discard", res, err)
}

func moved(what string, res storeforward.MoveResult, err error) (int, error) {
	switch {
	case errors.Is(err, storeforward.ErrUnavailable):
		return res.Moved, status.Errorf(codes.Unavailable, "sf %s: %v", what, err)
	case err != nil:
		return res.Moved, status.Errorf(codes.InvalidArgument, "sf %s: %v", what, err)
	case len(res.NotParked) > 0:
		return res.Moved, status.Errorf(codes.NotFound, "sf %s: not parked: %v (%d moved)", what, res.NotParked, res.Moved)
	}
	return res.Moved, nil
}
