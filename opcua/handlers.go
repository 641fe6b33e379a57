package opcua

import (
	"context"
	"errors"
	"fmt"
	"github.com/scadad/scadad/activegate"
	"github.com/scadad/scadad/uasec"
	"math"
	"reflect"
	"slices"
	"time"
	"unsafe"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
	"github.com/rs/zerolog"
)

// libraryService returns the library's service implementation T bound to
// srv. The library builds these inside Start and keeps them private, so a
// handler we register cannot otherwise delegate to them. Each of these types
// is a struct whose only field is the *server.Server; the layout is checked
// so that a library upgrade that changes it fails New instead of corrupting
// memory.
func libraryService[T any](srv *server.Server) (*T, error) {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct || t.NumField() != 1 || t.Field(0).Type != reflect.TypeFor[*server.Server]() {
		return nil, fmt.Errorf("gopcua %s is no longer a struct holding only *server.Server; review opcua/WORKAROUNDS.md", t)
	}
	p := new(T)
	*(**server.Server)(unsafe.Pointer(p)) = srv
	return p, nil
}

// registerHandlers installs a handler for every service the library serves.
// The library runs handlers on its single connection-reading goroutine with
// no recover, so one panicking request would kill the process; every
// handler here recovers, and the ones the library gets wrong are replaced.
func (s *Server) registerHandlers(srv *server.Server) error {
	session, err := libraryService[server.SessionService](srv)
	if err != nil {
		return err
	}
	discovery, err := libraryService[server.DiscoveryService](srv)
	if err != nil {
		return err
	}
	view, err := libraryService[server.ViewService](srv)
	if err != nil {
		return err
	}
	attr, err := libraryService[server.AttributeService](srv)
	if err != nil {
		return err
	}
	nodes, err := libraryService[server.NodeManagementService](srv)
	if err != nil {
		return err
	}
	query, err := libraryService[server.QueryService](srv)
	if err != nil {
		return err
	}
	const open, needSession = false, true
	handlers := []struct {
		typeID  uint16
		name    string
		session bool
		h       server.Handler
	}{
		{id.FindServersRequest_Encoding_DefaultBinary, "FindServers", open, s.findServers},
		{id.FindServersOnNetworkRequest_Encoding_DefaultBinary, "FindServersOnNetwork", open, discovery.FindServersOnNetwork},
		{id.GetEndpointsRequest_Encoding_DefaultBinary, "GetEndpoints", open, s.getEndpoints},
		{id.RegisterServerRequest_Encoding_DefaultBinary, "RegisterServer", open, discovery.RegisterServer},
		{id.RegisterServer2Request_Encoding_DefaultBinary, "RegisterServer2", open, discovery.RegisterServer2},

		{id.CreateSessionRequest_Encoding_DefaultBinary, "CreateSession", open, s.createSession(session.CreateSession)},
		{id.ActivateSessionRequest_Encoding_DefaultBinary, "ActivateSession", open, s.activateSession(session.ActivateSession)},
		{id.CloseSessionRequest_Encoding_DefaultBinary, "CloseSession", needSession, s.closeSession(session.CloseSession)},
		{id.CancelRequest_Encoding_DefaultBinary, "Cancel", needSession, session.Cancel},

		{id.AddNodesRequest_Encoding_DefaultBinary, "AddNodes", needSession, nodes.AddNodes},
		{id.AddReferencesRequest_Encoding_DefaultBinary, "AddReferences", needSession, nodes.AddReferences},
		{id.DeleteNodesRequest_Encoding_DefaultBinary, "DeleteNodes", needSession, nodes.DeleteNodes},
		{id.DeleteReferencesRequest_Encoding_DefaultBinary, "DeleteReferences", needSession, nodes.DeleteReferences},

		{id.BrowseRequest_Encoding_DefaultBinary, "Browse", needSession, s.browse},
		{id.BrowseNextRequest_Encoding_DefaultBinary, "BrowseNext", needSession, s.browseNext},
		{id.TranslateBrowsePathsToNodeIDsRequest_Encoding_DefaultBinary, "TranslateBrowsePaths", needSession, s.translateBrowsePaths},
		{id.RegisterNodesRequest_Encoding_DefaultBinary, "RegisterNodes", needSession, view.RegisterNodes},
		{id.UnregisterNodesRequest_Encoding_DefaultBinary, "UnregisterNodes", needSession, view.UnregisterNodes},

		{id.QueryFirstRequest_Encoding_DefaultBinary, "QueryFirst", needSession, query.QueryFirst},
		{id.QueryNextRequest_Encoding_DefaultBinary, "QueryNext", needSession, query.QueryNext},

		{id.ReadRequest_Encoding_DefaultBinary, "Read", needSession, s.read},
		{id.HistoryReadRequest_Encoding_DefaultBinary, "HistoryRead", needSession, attr.HistoryRead},
		{id.WriteRequest_Encoding_DefaultBinary, "Write", needSession, s.write},
		{id.HistoryUpdateRequest_Encoding_DefaultBinary, "HistoryUpdate", needSession, attr.HistoryUpdate},

		// Ours (call.go): the library's answers BadServiceUnsupported.
		{id.CallRequest_Encoding_DefaultBinary, "Call", needSession, s.call},

		// Subscriptions and monitored items are ours entirely
		// (subscriptions.go): the library's can deadlock.
		{id.CreateSubscriptionRequest_Encoding_DefaultBinary, "CreateSubscription", needSession, s.subs.createSubscription},
		{id.ModifySubscriptionRequest_Encoding_DefaultBinary, "ModifySubscription", needSession, s.subs.modifySubscription},
		{id.SetPublishingModeRequest_Encoding_DefaultBinary, "SetPublishingMode", needSession, s.subs.setPublishingMode},
		{id.PublishRequest_Encoding_DefaultBinary, "Publish", needSession, s.subs.publish},
		{id.RepublishRequest_Encoding_DefaultBinary, "Republish", needSession, s.subs.republish},
		{id.TransferSubscriptionsRequest_Encoding_DefaultBinary, "TransferSubscriptions", needSession, s.subs.transferSubscriptions},
		{id.DeleteSubscriptionsRequest_Encoding_DefaultBinary, "DeleteSubscriptions", needSession, s.subs.deleteSubscriptions},

		{id.CreateMonitoredItemsRequest_Encoding_DefaultBinary, "CreateMonitoredItems", needSession, s.subs.createMonitoredItems},
		{id.ModifyMonitoredItemsRequest_Encoding_DefaultBinary, "ModifyMonitoredItems", needSession, s.subs.modifyMonitoredItems},
		{id.SetMonitoringModeRequest_Encoding_DefaultBinary, "SetMonitoringMode", needSession, s.subs.setMonitoringMode},
		{id.SetTriggeringRequest_Encoding_DefaultBinary, "SetTriggering", needSession, s.subs.setTriggering},
		{id.DeleteMonitoredItemsRequest_Encoding_DefaultBinary, "DeleteMonitoredItems", needSession, s.subs.deleteMonitoredItems},
	}
	for _, h := range handlers {
		srv.RegisterHandler(h.typeID, s.guard(h.name, h.session, h.h))
	}
	return nil
}

// guard recovers panics and refuses requests without an activated session.
func (s *Server) guard(service string, needSession bool, h server.Handler) server.Handler {
	return func(sc *uasc.SecureChannel, r ua.Request, reqID uint32) (resp ua.Response, err error) {
		defer func() {
			if p := recover(); p != nil {
				s.metrics.panics.WithLabelValues(service).Inc()
				s.log.Error().Interface("panic", p).Str("service", service).Msg("opcua request handler panicked; answered BadInternalError")
				resp, err = nil, ua.StatusBadInternalError
			}
		}()
		if r == nil || r.Header() == nil {
			s.metrics.rejected.WithLabelValues("no-header").Inc()
			return nil, ua.StatusBadRequestHeaderInvalid
		}
		if needSession {
			if _, ok := s.sessions.identity(r.Header().AuthenticationToken); !ok {
				s.metrics.rejected.WithLabelValues("no-session").Inc()
				return nil, ua.StatusBadSessionIDInvalid
			}
		}
		return h(sc, r, reqID)
	}
}

func responseHeader(req *ua.RequestHeader, now time.Time) *ua.ResponseHeader {
	return &ua.ResponseHeader{
		Timestamp:          now,
		RequestHandle:      req.RequestHandle,
		ServiceResult:      ua.StatusOK,
		ServiceDiagnostics: &ua.DiagnosticInfo{},
		StringTable:        []string{},
		AdditionalHeader:   ua.NewExtensionObject(nil),
	}
}

func (s *Server) checkCount(n int) error {
	return checkCount(n, s.cfg.MaxNodesPerRequest, s.metrics)
}

// checkCount refuses a request of no operations, or of more than limit
// (counted as rejected).
func checkCount(n, limit int, m *metrics) error {
	if n == 0 {
		return ua.StatusBadNothingToDo
	}
	if n > limit {
		m.rejected.WithLabelValues("too-many-operations").Inc()
		return ua.StatusBadTooManyOperations
	}
	return nil
}

// --- sessions ---

func (s *Server) createSession(lib server.Handler) server.Handler {
	return func(sc *uasc.SecureChannel, r ua.Request, reqID uint32) (ua.Response, error) {
		req, ok := r.(*ua.CreateSessionRequest)
		if !ok {
			return nil, ua.StatusBadRequestTypeInvalid
		}
		if s.sessions.full(s.cfg.MaxSessions) {
			s.metrics.rejected.WithLabelValues("too-many-sessions").Inc()
			return nil, ua.StatusBadTooManySessions
		}
		resp, err := lib(sc, r, reqID)
		if err != nil {
			return resp, err
		}
		if res, ok := resp.(*ua.CreateSessionResponse); ok {
			// A session the table does not record cannot be activated,
			// so a refusal here leaves nothing usable behind.
			if code := s.admitChannel(req, res); code != ua.StatusOK {
				return nil, code
			}
			// The library lists the endpoints whose URL is the request's,
			// and its own are on loopback (front.go).
			res.ServerEndpoints = s.publicEndpoints()
			// Clients size their keep-alives from this, and the session
			// table expires the session after it: a second would make
			// them chatter. The library answers a request over its 1 h
			// limit with its 60 s default; the limit is the better
			// answer (WORKAROUNDS.md row 11).
			if req.RequestedSessionTimeout > 0 {
				res.RevisedSessionTimeout = clampFloat(req.RequestedSessionTimeout, 10_000, 3_600_000)
			} else if res.RevisedSessionTimeout <= 0 {
				res.RevisedSessionTimeout = 60_000
			}
			s.sessions.created(res.AuthenticationToken, res.ServerNonce, time.Duration(res.RevisedSessionTimeout*float64(time.Millisecond)))
		}
		return resp, nil
	}
}

// admitChannel decides whether the channel a session is being created on
// may carry one. The library opens a channel with whatever policy the
// client asks for and checks no client certificate; it does not tell a
// handler which security mode the channel has, but it signs the
// CreateSession answer exactly when the channel is not None.
func (s *Server) admitChannel(req *ua.CreateSessionRequest, res *ua.CreateSessionResponse) ua.StatusCode {
	secured := res.ServerSignature != nil && len(res.ServerSignature.Signature) > 0
	if !secured {
		if s.offersNone() {
			return ua.StatusOK
		}
		// Every server answers discovery on a None channel; a session
		// there would bypass the configured security.
		s.metrics.rejected.WithLabelValues("security-mode").Inc()
		s.warnOnce("none:"+appURIOf(req), func(e *zerolog.Event) *zerolog.Event {
			return e.Str("application_uri", appURIOf(req))
		}, "OPC UA session refused: security None is not offered by this server; the client must use one of its Sign or SignAndEncrypt endpoints")
		return ua.StatusBadSecurityModeRejected
	}
	err := s.trust.check(req.ClientCertificate, s.clock.Now())
	if err == nil {
		return ua.StatusOK
	}
	var u *untrustedError
	if !errors.As(err, &u) {
		u = &untrustedError{code: ua.StatusBadCertificateUntrusted, why: err.Error()}
	}
	s.metrics.rejected.WithLabelValues("certificate-untrusted").Inc()
	s.warnOnce("cert:"+uasec.Thumbprint(req.ClientCertificate), func(e *zerolog.Event) *zerolog.Event {
		return e.Str("application_uri", appURIOf(req)).Str("reason", u.Error())
	}, "OPC UA session refused: client certificate not trusted")
	return u.code
}

func appURIOf(req *ua.CreateSessionRequest) string {
	if req.ClientDescription == nil {
		return ""
	}
	return req.ClientDescription.ApplicationURI
}

// publicEndpoints are the library's endpoint descriptions with the URL
// clients connect to: the library listens on loopback behind the front
// (front.go) and would advertise that address.
func (s *Server) publicEndpoints() []*ua.EndpointDescription {
	url := s.cfg.endpointURL()
	lib := s.srv().Endpoints()
	out := make([]*ua.EndpointDescription, 0, len(lib))
	for _, ep := range lib {
		e := *ep
		e.EndpointURL = url
		if ep.Server != nil {
			app := *ep.Server
			app.DiscoveryURLs = []string{url}
			e.Server = &app
		}
		out = append(out, &e)
	}
	return out
}

// getEndpoints answers GetEndpoints with every endpoint (Part 4, 5.4.4),
// whatever host name the client used to reach us: the library answered
// only a request whose URL matched its own exactly, which a client that
// used an IP address, another name or a different case never got.
func (s *Server) getEndpoints(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.GetEndpointsRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	eps := s.publicEndpoints()
	if len(req.ProfileURIs) > 0 {
		eps = slices.DeleteFunc(eps, func(ep *ua.EndpointDescription) bool {
			return !slices.Contains(req.ProfileURIs, ep.TransportProfileURI)
		})
	}
	return &ua.GetEndpointsResponse{ResponseHeader: responseHeader(req.RequestHeader, s.clock.Now()), Endpoints: eps}, nil
}

// findServers answers FindServers with this server's description (Part 4,
// 5.4.2), unless the request names other servers only.
func (s *Server) findServers(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.FindServersRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	servers := []*ua.ApplicationDescription{}
	if eps := s.publicEndpoints(); len(eps) > 0 && eps[0].Server != nil {
		app := eps[0].Server
		if len(req.ServerURIs) == 0 || slices.Contains(req.ServerURIs, app.ApplicationURI) {
			servers = append(servers, app)
		}
	}
	return &ua.FindServersResponse{ResponseHeader: responseHeader(req.RequestHeader, s.clock.Now()), Servers: servers}, nil
}

func (s *Server) activateSession(lib server.Handler) server.Handler {
	return func(sc *uasc.SecureChannel, r ua.Request, reqID uint32) (ua.Response, error) {
		req, ok := r.(*ua.ActivateSessionRequest)
		if !ok {
			return nil, ua.StatusBadRequestTypeInvalid
		}
		if req.ClientSignature == nil {
			return nil, ua.StatusBadApplicationSignatureInvalid
		}
		if _, ok := s.sessions.nonce(req.RequestHeader.AuthenticationToken); !ok {
			return nil, ua.StatusBadSessionIDInvalid
		}
		identity, code := s.checkIdentity(req.UserIdentityToken, req.RequestHeader.AuthenticationToken)
		if code != ua.StatusOK {
			s.metrics.rejected.WithLabelValues("identity").Inc()
			return nil, code
		}
		resp, err := lib(sc, r, reqID)
		if err != nil {
			return resp, err
		}
		if res, ok := resp.(*ua.ActivateSessionResponse); ok {
			if !s.sessions.activate(req.RequestHeader.AuthenticationToken, identity, res.ServerNonce, s.cfg.MaxSessions) {
				s.metrics.rejected.WithLabelValues("too-many-sessions").Inc()
				return nil, ua.StatusBadTooManySessions
			}
		}
		return resp, nil
	}
}

func (s *Server) closeSession(lib server.Handler) server.Handler {
	return func(sc *uasc.SecureChannel, r ua.Request, reqID uint32) (ua.Response, error) {
		s.sessions.closed(r.Header().AuthenticationToken)
		return lib(sc, r, reqID)
	}
}

// --- attribute service ---

func (s *Server) read(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.ReadRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if err := s.checkCount(len(req.NodesToRead)); err != nil {
		return nil, err
	}
	if req.TimestampsToReturn > ua.TimestampsToReturnNeither {
		return nil, ua.StatusBadTimestampsToReturnInvalid
	}
	now := s.clock.Now()
	results := make([]*ua.DataValue, len(req.NodesToRead))
	for i, rv := range req.NodesToRead {
		results[i] = stamped(s.readOne(rv, now), req.TimestampsToReturn)
	}
	return &ua.ReadResponse{ResponseHeader: responseHeader(req.RequestHeader, now), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

func (s *Server) readOne(rv *ua.ReadValueID, now time.Time) (dv *ua.DataValue) {
	if rv == nil || rv.NodeID == nil {
		return statusValue(ua.StatusBadNodeIDInvalid, now)
	}
	if rv.IndexRange != "" {
		return statusValue(ua.StatusBadIndexRangeInvalid, now)
	}
	if dv, ok := s.readCondition(rv, now); ok {
		return dv
	}
	if dv, ok := s.readMetadata(rv, now); ok {
		return dv
	}
	switch rv.NodeID.Namespace() {
	case s.ns.idx:
		return s.ns.Attribute(rv.NodeID, rv.AttributeID)
	case 0:
		defer func() {
			if p := recover(); p != nil {
				s.metrics.panics.WithLabelValues("Read-ns0").Inc()
				dv = statusValue(ua.StatusBadInternalError, now)
			}
		}()
		n0, err := ns0(s.srv())
		if err != nil {
			return statusValue(ua.StatusBadInternalError, now)
		}
		dv = n0.Attribute(rv.NodeID, rv.AttributeID)
		// The library stores DataType as an ExpandedNodeID (its Browse needs
		// that), but the attribute is a NodeId on the wire.
		if rv.AttributeID == ua.AttributeIDDataType && dv != nil && dv.Value != nil {
			if e, ok := dv.Value.Value().(*ua.ExpandedNodeID); ok && e != nil && e.NodeID != nil {
				out := *dv
				out.Value = ua.MustVariant(e.NodeID)
				dv = &out
			}
		}
		return dv
	default:
		return statusValue(ua.StatusBadNodeIDUnknown, now)
	}
}

func (s *Server) write(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.WriteRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if err := s.checkCount(len(req.NodesToWrite)); err != nil {
		return nil, err
	}
	who, _ := s.sessions.identity(req.RequestHeader.AuthenticationToken) // guard: activated
	results := make([]ua.StatusCode, len(req.NodesToWrite))
	for i, wv := range req.NodesToWrite {
		results[i] = s.writeOne(wv, who)
		if results[i] != ua.StatusOK {
			s.log.Info().Stringer("node", nodeIDOrNil(wv)).Str("status", results[i].Error()).Msg("opcua write refused")
		}
	}
	return &ua.WriteResponse{ResponseHeader: responseHeader(req.RequestHeader, s.clock.Now()), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

func nodeIDOrNil(wv *ua.WriteValue) fmt.Stringer {
	if wv == nil || wv.NodeID == nil {
		return ua.NewTwoByteNodeID(0)
	}
	return wv.NodeID
}

// StatusWriteDenied (BadInvalidState) answers a write the role gate
// refuses. It is spelled as a literal because the ua package's status codes
// are variables.
const StatusWriteDenied ua.StatusCode = 0x80AF0000

// writeOne validates one write completely before the role gate sees it,
// and only a valid, permitted write reaches the gateway.
func (s *Server) writeOne(wv *ua.WriteValue, who identity) ua.StatusCode {
	invalid := func(c ua.StatusCode) ua.StatusCode {
		s.metrics.writes.WithLabelValues("invalid").Inc()
		return c
	}
	if wv == nil || wv.NodeID == nil {
		return invalid(ua.StatusBadNodeIDInvalid)
	}
	nid := wv.NodeID
	var v varNode
	switch nid.Namespace() {
	case 0:
		n0, err := ns0(s.srv())
		if err != nil || n0.Node(nid) == nil {
			return invalid(ua.StatusBadNodeIDUnknown)
		}
		return invalid(ua.StatusBadNotWritable)
	case s.ns.idx:
		var ok bool
		if v, ok = s.ns.lookupVar(nid); !ok {
			s.ns.mu.RLock()
			k := s.ns.kindLocked(nid)
			s.ns.mu.RUnlock()
			if k != kindNone {
				return invalid(ua.StatusBadNotWritable)
			}
			return invalid(ua.StatusBadNodeIDUnknown)
		}
	default:
		return invalid(ua.StatusBadNodeIDUnknown)
	}
	if wv.AttributeID != ua.AttributeIDValue {
		return invalid(ua.StatusBadNotWritable)
	}
	if wv.IndexRange != "" {
		return invalid(ua.StatusBadWriteNotSupported)
	}
	if !v.writable {
		return invalid(ua.StatusBadNotWritable)
	}
	if wv.Value == nil || !writeTypeOK(v.typ, wv.Value.Value) {
		return invalid(ua.StatusBadTypeMismatch)
	}
	if str, ok := wv.Value.Value.Value().(string); ok && len(str) > s.cfg.MaxWriteStringLength {
		return invalid(ua.StatusBadOutOfRange)
	}
	if !v.meta.allowNonFinite && nonFinite(wv.Value.Value.Value()) {
		// A NaN or an infinity sent on to a controller's setpoint is
		// never what an operator meant.
		return invalid(ua.StatusBadOutOfRange)
	}

	if !who.canWrite {
		s.metrics.denied.WithLabelValues("read-only-identity").Inc()
		s.metrics.writes.WithLabelValues("denied").Inc()
		s.log.Warn().Str("identity", who.name).Str("instance", v.instance).Str("attribute", v.name).
			Msg("opcua write denied: this identity may not write (can_write, or anonymous_can_write)")
		return ua.StatusBadUserAccessDenied
	}
	st := s.roles.Current()
	if allow, reason := WriteGate(st); !allow {
		s.metrics.denied.WithLabelValues(reason).Inc()
		s.gate.Denied(activegate.SurfaceWrite, reason)
		s.metrics.writes.WithLabelValues("denied").Inc()
		s.log.Warn().Str("reason", reason).Stringer("role", st.Role).Int("voters", st.Voters).
			Str("instance", v.instance).Str("attribute", v.name).Msg("opcua write denied by role gate")
		return StatusWriteDenied
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer cancel()
	err := s.writer.Write(ctx, v.instance, v.name, wv.Value.Value.Value(), st.Epoch)
	if err == nil {
		s.metrics.writes.WithLabelValues("ok").Inc()
		return ua.StatusOK
	}
	s.metrics.writes.WithLabelValues("failed").Inc()
	s.log.Warn().Err(err).Str("instance", v.instance).Str("attribute", v.name).Stringer("epoch", st.Epoch).Msg("opcua gateway write failed")
	var code ua.StatusCode
	switch {
	case errors.As(err, &code) && code != ua.StatusOK:
		return code
	case errors.Is(err, context.DeadlineExceeded):
		return ua.StatusBadTimeout
	default:
		return ua.StatusBadCommunicationError
	}
}

// --- view service ---

func (s *Server) browse(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.BrowseRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if err := s.checkCount(len(req.NodesToBrowse)); err != nil {
		return nil, err
	}
	// The server has no views (Part 4, 5.8.2.2).
	if req.View != nil && req.View.ViewID != nil && !isNullNodeID(req.View.ViewID) {
		return nil, ua.StatusBadViewIDUnknown
	}
	session := tokenKey(req.RequestHeader.AuthenticationToken)
	results := make([]*ua.BrowseResult, len(req.NodesToBrowse))
	for i, bd := range req.NodesToBrowse {
		res := s.browseWithConditions(bd)
		if code := s.checkBrowseDescription(bd); code != ua.StatusOK && res.StatusCode == ua.StatusOK {
			res = &ua.BrowseResult{StatusCode: code, References: []*ua.ReferenceDescription{}}
		}
		if res.StatusCode == ua.StatusOK {
			res.References = maskReferences(res.References, bd.ResultMask)
			var ok bool
			if res.References, res.ContinuationPoint, ok = s.continuations.page(session, res.References, req.RequestedMaxReferencesPerNode); !ok {
				res = &ua.BrowseResult{StatusCode: ua.StatusBadNoContinuationPoints, References: []*ua.ReferenceDescription{}}
			}
		}
		results[i] = res
	}
	return &ua.BrowseResponse{ResponseHeader: responseHeader(req.RequestHeader, s.clock.Now()), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

// maskReferences keeps of each reference only the fields mask asks for
// (Part 4, 7.5 BrowseResultMask; the NodeId always), the others null, so
// a client that asks for little gets little. Continuation points hold the
// masked references, so BrowseNext answers as the Browse did.
func maskReferences(refs []*ua.ReferenceDescription, mask uint32) []*ua.ReferenceDescription {
	all := uint32(ua.BrowseResultMaskAll)
	if mask&all == all {
		return refs
	}
	has := func(bit ua.BrowseResultMask) bool { return mask&uint32(bit) != 0 }
	out := make([]*ua.ReferenceDescription, len(refs))
	for i, r := range refs {
		m := &ua.ReferenceDescription{NodeID: r.NodeID, ReferenceTypeID: ua.NewTwoByteNodeID(0),
			BrowseName: &ua.QualifiedName{}, DisplayName: &ua.LocalizedText{}, TypeDefinition: ua.NewTwoByteExpandedNodeID(0)}
		if has(ua.BrowseResultMaskReferenceTypeID) {
			m.ReferenceTypeID = r.ReferenceTypeID
		}
		if has(ua.BrowseResultMaskIsForward) {
			m.IsForward = r.IsForward
		}
		if has(ua.BrowseResultMaskNodeClass) {
			m.NodeClass = r.NodeClass
		}
		if has(ua.BrowseResultMaskBrowseName) {
			m.BrowseName = r.BrowseName
		}
		if has(ua.BrowseResultMaskDisplayName) {
			m.DisplayName = r.DisplayName
		}
		if has(ua.BrowseResultMaskTypeDefinition) {
			m.TypeDefinition = r.TypeDefinition
		}
		out[i] = m
	}
	return out
}

// checkBrowseDescription names what is wrong with a description (Part 4,
// 5.8.2.2) beyond its node: a direction that is none of the three, a
// ReferenceTypeId that is no reference type.
func (s *Server) checkBrowseDescription(bd *ua.BrowseDescription) ua.StatusCode {
	switch {
	case bd == nil:
		return ua.StatusOK // browseOne answers BadNodeIdInvalid
	case bd.BrowseDirection > ua.BrowseDirectionBoth:
		return ua.StatusBadBrowseDirectionInvalid
	case bd.ReferenceTypeID != nil && !s.refTypes.isReferenceType(bd.ReferenceTypeID):
		return ua.StatusBadReferenceTypeIDInvalid
	}
	return ua.StatusOK
}

func (s *Server) browseOne(bd *ua.BrowseDescription) (res *ua.BrowseResult) {
	if bd == nil || bd.NodeID == nil || bd.ReferenceTypeID == nil {
		return &ua.BrowseResult{StatusCode: ua.StatusBadNodeIDInvalid}
	}
	if res, ok := s.browseMetadata(bd); ok {
		return res
	}
	switch bd.NodeID.Namespace() {
	case s.ns.idx:
		return s.ns.Browse(bd)
	case 0:
		defer func() {
			if p := recover(); p != nil {
				s.metrics.panics.WithLabelValues("Browse-ns0").Inc()
				res = &ua.BrowseResult{StatusCode: ua.StatusBadInternalError}
			}
		}()
		n0, err := ns0(s.srv())
		if err != nil {
			return &ua.BrowseResult{StatusCode: ua.StatusBadInternalError}
		}
		res = s.browseNS0(n0, bd)
		if res.StatusCode == ua.StatusOK && bd.NodeID.Equal(ua.NewNumericNodeID(0, id.Server_Namespaces)) {
			res.References = append(res.References, describeRefs(bd, s.metadataObjectRefs(), s.refTypes)...)
		}
		return res
	default:
		return &ua.BrowseResult{StatusCode: ua.StatusBadNodeIDUnknown}
	}
}

// --- subscriptions ---

func clampFloat(v, lo, hi float64) float64 {
	if math.IsNaN(v) || v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// nodeExists reports whether a monitored item may watch nid.
func (s *Server) nodeExists(nid *ua.NodeID) bool {
	if _, _, ok := s.describedNamespace(nid); ok {
		return true
	}
	switch nid.Namespace() {
	case 0:
		n0, err := ns0(s.srv())
		return err == nil && n0.Node(nid) != nil
	case s.ns.idx:
		s.ns.mu.RLock()
		defer s.ns.mu.RUnlock()
		return s.ns.kindLocked(nid) != kindNone
	default:
		return false
	}
}

// nonFinite says whether x is a floating-point NaN or infinity.
func nonFinite(x any) bool {
	switch f := x.(type) {
	case float64:
		return math.IsNaN(f) || math.IsInf(f, 0)
	case float32:
		return math.IsNaN(float64(f)) || math.IsInf(float64(f), 0)
	}
	return false
}
