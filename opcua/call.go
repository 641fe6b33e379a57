package opcua

import (
	"context"
	"errors"
	"strconv"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
)

// The Call service (Part 4, 5.11), ours: gopcua v0.9.1's answers
// BadServiceUnsupported. It serves the methods of Part 9 that clients of
// alarms use: ConditionRefresh and ConditionRefresh2 on ConditionType,
// and Acknowledge, Confirm and AddComment on a condition. Acknowledge and
// Confirm go to the daemon's alarm service, which lets them through on the
// Active only (elsewhere BadInvalidState, counted by the service as
// scadad_gate_denied_total{surface="ack"}); the operator is the session's
// identity.

// call answers a CallRequest, one result per method.
func (s *Server) call(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.CallRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if err := s.checkCount(len(req.MethodsToCall)); err != nil {
		return nil, err
	}
	key := tokenKey(req.RequestHeader.AuthenticationToken)
	who, _ := s.sessions.identity(req.RequestHeader.AuthenticationToken) // guard: activated
	results := make([]*ua.CallMethodResult, len(req.MethodsToCall))
	for i, m := range req.MethodsToCall {
		method, res := s.callOne(key, who, m)
		if res.InputArgumentResults == nil {
			res.InputArgumentResults = []ua.StatusCode{}
		}
		res.InputArgumentDiagnosticInfos = []*ua.DiagnosticInfo{}
		if res.OutputArguments == nil {
			res.OutputArguments = []*ua.Variant{}
		}
		result := "ok"
		switch {
		case res.StatusCode == StatusWriteDenied:
			result = "refused"
		case res.StatusCode != ua.StatusOK:
			result = "failed"
		}
		s.metrics.calls.WithLabelValues(method, result).Inc()
		results[i] = res
	}
	return &ua.CallResponse{ResponseHeader: responseHeader(req.RequestHeader, s.clock.Now()), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

func isNS0(nid *ua.NodeID, want uint32) bool {
	return nid != nil && nid.Namespace() == 0 && nid.Type() != ua.NodeIDTypeString && nid.Type() != ua.NodeIDTypeGUID &&
		nid.Type() != ua.NodeIDTypeByteString && nid.IntID() == want
}

// callOne runs one method; it returns the method's name for the metrics.
func (s *Server) callOne(key string, who identity, m *ua.CallMethodRequest) (string, *ua.CallMethodResult) {
	fail := func(code ua.StatusCode) *ua.CallMethodResult { return &ua.CallMethodResult{StatusCode: code} }
	if m == nil || m.ObjectID == nil || m.MethodID == nil {
		return "unknown", fail(ua.StatusBadNodeIDInvalid)
	}
	if isNS0(m.ObjectID, id.ConditionType) {
		switch {
		case isNS0(m.MethodID, id.ConditionType_ConditionRefresh):
			return "ConditionRefresh", s.conditionRefresh(key, m.InputArguments, false)
		case isNS0(m.MethodID, id.ConditionType_ConditionRefresh2):
			return "ConditionRefresh", s.conditionRefresh(key, m.InputArguments, true)
		}
		return "unknown", fail(ua.StatusBadMethodInvalid)
	}
	e, _, isField, isCondition := s.conditionNode(m.ObjectID)
	if !isCondition && !s.nodeExists(m.ObjectID) {
		return "unknown", fail(ua.StatusBadNodeIDUnknown)
	}
	if !isCondition || isField {
		return "unknown", fail(ua.StatusBadMethodInvalid)
	}
	var name string
	switch {
	case isNS0(m.MethodID, id.AcknowledgeableConditionType_Acknowledge):
		name = "Acknowledge"
	case isNS0(m.MethodID, id.AcknowledgeableConditionType_Confirm):
		name = "Confirm"
	case isNS0(m.MethodID, id.ConditionType_AddComment):
		name = "AddComment"
	default:
		return "unknown", fail(ua.StatusBadMethodInvalid)
	}
	return name, s.conditionMethod(name, e.c.ID, who, m.InputArguments)
}

// checkArguments checks a method's input arguments against the types it
// takes (built-in type ids).
func checkArguments(args []*ua.Variant, want ...ua.TypeID) *ua.CallMethodResult {
	switch {
	case len(args) < len(want):
		return &ua.CallMethodResult{StatusCode: ua.StatusBadArgumentsMissing}
	case len(args) > len(want):
		return &ua.CallMethodResult{StatusCode: ua.StatusBadTooManyArguments}
	}
	results := make([]ua.StatusCode, len(args))
	bad := false
	for i, a := range args {
		if a == nil || a.Type() != want[i] || a.ArrayLength() > 0 || len(a.ArrayDimensions()) > 0 {
			results[i], bad = ua.StatusBadTypeMismatch, true
		}
	}
	if bad {
		return &ua.CallMethodResult{StatusCode: ua.StatusBadInvalidArgument, InputArgumentResults: results}
	}
	return nil
}

// conditionRefresh is ConditionRefresh(SubscriptionId) and, with item,
// ConditionRefresh2(SubscriptionId, MonitoredItemId) (Part 9, 5.5.7).
func (s *Server) conditionRefresh(key string, args []*ua.Variant, item bool) *ua.CallMethodResult {
	types := []ua.TypeID{ua.TypeIDUint32}
	if item {
		types = append(types, ua.TypeIDUint32)
	}
	if bad := checkArguments(args, types...); bad != nil {
		return bad
	}
	subID, _ := args[0].Value().(uint32)
	var itemID uint32
	if item {
		itemID, _ = args[1].Value().(uint32)
	}
	retained := s.conds.retained()
	events := make([]*event, len(retained))
	for i, e := range retained {
		events[i] = s.ns.conditionEvent(e)
	}
	n := s.refreshes.Add(1)
	now := s.clock.Now()
	start := refreshEvent(id.RefreshStartEventType, []byte("refresh:"+strconv.FormatUint(n, 10)+":start"), now)
	end := refreshEvent(id.RefreshEndEventType, []byte("refresh:"+strconv.FormatUint(n, 10)+":end"), now)
	code := s.subs.conditionRefresh(key, subID, itemID, start, end, events)
	return &ua.CallMethodResult{StatusCode: code}
}

// conditionMethod is Acknowledge, Confirm or AddComment(EventId, Comment)
// on the condition of alarm. The EventId must be the condition's last
// (BadEventIdUnknown otherwise: the client acts on what it has not seen).
func (s *Server) conditionMethod(method, alarm string, who identity, args []*ua.Variant) *ua.CallMethodResult {
	if bad := checkArguments(args, ua.TypeIDByteString, ua.TypeIDLocalizedText); bad != nil {
		return bad
	}
	fail := func(code ua.StatusCode) *ua.CallMethodResult { return &ua.CallMethodResult{StatusCode: code} }
	e, ok := s.conds.get(alarm)
	if !ok {
		return fail(ua.StatusBadNodeIDUnknown)
	}
	eid, _ := args[0].Value().([]byte)
	if string(eid) != string(eventID(e.c)) {
		return fail(ua.StatusBadEventIDUnknown)
	}
	var comment string
	if lt, _ := args[1].Value().(*ua.LocalizedText); lt != nil {
		comment = lt.Text
	}
	if len(comment) > s.cfg.MaxWriteStringLength {
		return fail(ua.StatusBadOutOfRange)
	}
	switch {
	case method == "Acknowledge" && e.c.Acked:
		return fail(ua.StatusBadConditionBranchAlreadyAcked)
	case method == "Confirm" && e.c.Confirmed:
		return fail(ua.StatusBadConditionBranchAlreadyConfirmed)
	}
	if s.alarms == nil {
		return fail(ua.StatusBadNotImplemented)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer cancel()
	var err error
	switch method {
	case "Acknowledge":
		err = s.alarms.Acknowledge(ctx, alarm, who.name, comment)
	case "Confirm":
		err = s.alarms.Confirm(ctx, alarm, who.name, comment)
	default:
		err = s.alarms.Comment(ctx, alarm, who.name, comment)
	}
	if err == nil {
		s.log.Info().Str("alarm", alarm).Str("method", method).Str("identity", who.name).Msg("opcua alarm method")
		return fail(ua.StatusOK)
	}
	var gate gateRefusal
	var code ua.StatusCode
	switch {
	case errors.As(err, &gate):
		code = StatusWriteDenied
	case errors.As(err, &code) && code != ua.StatusOK:
	case errors.Is(err, context.DeadlineExceeded):
		code = ua.StatusBadTimeout
	default:
		code = ua.StatusBadCommunicationError
	}
	s.log.Warn().Err(err).Str("alarm", alarm).Str("method", method).Str("identity", who.name).Str("status", code.Error()).Msg("opcua alarm method refused")
	return fail(code)
}
