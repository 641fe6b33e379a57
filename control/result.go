package control

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
)

// codeStorage marks a leader-side storage failure in a forwarded result; it
// is not a deterministic FSM verdict.
const codeStorage = "storage"

// encodeResult turns an FSM verdict into the wire form of a forwarded Apply.
func encodeResult(res *fsm.Result) (*controlpb.ApplyResponse, error) {
	out := &controlpb.ApplyResponse{Index: res.Index}
	if res.Err != nil {
		out.Error = res.Err.Error()
		var ce *fsm.CommandError
		if errors.As(res.Err, &ce) {
			out.ErrorCode, out.Error = string(ce.Code), ce.Message
		} else {
			out.ErrorCode = codeStorage
		}
	}
	plain := *res
	plain.Err = nil
	body, err := json.Marshal(&plain)
	if err != nil {
		return nil, fmt.Errorf("encode apply result: %w", err)
	}
	out.ResultJson = body
	return out, nil
}

// decodeResult is encodeResult's inverse on the forwarding node.
func decodeResult(resp *controlpb.ApplyResponse) (*fsm.Result, error) {
	var res fsm.Result
	if len(resp.ResultJson) > 0 {
		if err := json.Unmarshal(resp.ResultJson, &res); err != nil {
			return nil, fmt.Errorf("decode forwarded apply result: %w", err)
		}
	}
	res.Index = resp.Index
	switch resp.ErrorCode {
	case "":
	case codeStorage:
		res.Err = fmt.Errorf("leader storage: %s", resp.Error)
	default:
		res.Err = &fsm.CommandError{Code: fsm.Code(resp.ErrorCode), Message: resp.Error}
	}
	return &res, nil
}
