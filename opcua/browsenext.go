package opcua

import (
	"encoding/binary"
	"sync"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
)

// maxBrowseContinuationPoints is how many continuation points one session
// may hold at once (Part 4, 5.8.2: advertised as
// ServerCapabilities.MaxBrowseContinuationPoints). Each holds what is left
// of one node's references, so the bound keeps a client that browses
// without ever continuing from growing the server.
const maxBrowseContinuationPoints = 16

// continuationPoints holds, per session, the references a Browse or
// BrowseNext could not return within the client's
// RequestedMaxReferencesPerNode. A session's points go with the session.
type continuationPoints struct {
	mu        sync.Mutex
	bySession map[string]*sessionPoints // by session key (tokenKey)
}

type sessionPoints struct {
	next   uint64 // the id of the next point handed out
	points map[string]*continuation
}

// continuation is what is left of one node's references.
type continuation struct {
	rest []*ua.ReferenceDescription
	max  uint32 // the RequestedMaxReferencesPerNode of its Browse
}

func newContinuationPoints() *continuationPoints {
	return &continuationPoints{bySession: make(map[string]*sessionPoints)}
}

// page returns the first max references (all with max 0) and, when more
// are left, a new continuation point holding them; ok is false when the
// session holds as many points as it may already.
func (c *continuationPoints) page(session string, refs []*ua.ReferenceDescription, max uint32) (first []*ua.ReferenceDescription, point []byte, ok bool) {
	if max == 0 || uint64(len(refs)) <= uint64(max) {
		return refs, nil, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.bySession[session]
	if sp == nil {
		sp = &sessionPoints{points: make(map[string]*continuation)}
		c.bySession[session] = sp
	}
	if len(sp.points) >= maxBrowseContinuationPoints {
		return nil, nil, false
	}
	// A counter is enough: a point is looked up within its own session
	// only, so guessing another's gives nothing.
	sp.next++
	point = binary.BigEndian.AppendUint64(nil, sp.next)
	sp.points[string(point)] = &continuation{rest: refs[max:], max: max}
	return refs[:max], point, true
}

// resume returns the next page of a session's point, releasing the point
// when nothing is left (or when release is set, returning nothing); ok is
// false for a point the session does not hold.
func (c *continuationPoints) resume(session string, point []byte, release bool) (refs []*ua.ReferenceDescription, more []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.bySession[session]
	if sp == nil {
		return nil, nil, false
	}
	cont, ok := sp.points[string(point)]
	if !ok {
		return nil, nil, false
	}
	if release || uint64(len(cont.rest)) <= uint64(cont.max) {
		delete(sp.points, string(point))
		if release {
			return nil, nil, true
		}
		return cont.rest, nil, true
	}
	refs, cont.rest = cont.rest[:cont.max], cont.rest[cont.max:]
	return refs, point, true
}

// dropSession releases every point of a session that ended.
func (c *continuationPoints) dropSession(session string) {
	c.mu.Lock()
	delete(c.bySession, session)
	c.mu.Unlock()
}

// browseNext serves BrowseNext (Part 4, 5.8.3): the next references of
// each continuation point, or their release.
func (s *Server) browseNext(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.BrowseNextRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if err := s.checkCount(len(req.ContinuationPoints)); err != nil {
		return nil, err
	}
	session := tokenKey(req.RequestHeader.AuthenticationToken)
	results := make([]*ua.BrowseResult, len(req.ContinuationPoints))
	for i, cp := range req.ContinuationPoints {
		refs, more, ok := s.continuations.resume(session, cp, req.ReleaseContinuationPoints)
		if !ok {
			results[i] = &ua.BrowseResult{StatusCode: ua.StatusBadContinuationPointInvalid, References: []*ua.ReferenceDescription{}}
			continue
		}
		if refs == nil {
			refs = []*ua.ReferenceDescription{}
		}
		results[i] = &ua.BrowseResult{StatusCode: ua.StatusOK, ContinuationPoint: more, References: refs}
	}
	return &ua.BrowseNextResponse{ResponseHeader: responseHeader(req.RequestHeader, s.clock.Now()), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}
