package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway/gatewaypb"
	"github.com/scadad/scadad/role"
)

// Capability strings a gateway may advertise in OpenSessionReply.capabilities.
const (
	// CapBulkSubscribeSupervisory means SubscribeBulk honours supervisory=true.
	// Without it the gateway would advise plain, which silently breaks writes
	// on a supervisory (write user 0) session.
	CapBulkSubscribeSupervisory = "bulk-subscribe-supervisory"
	// CapBulkSubscribeCommands means SubscribeBulk/AddItemBulk exist at all.
	CapBulkSubscribeCommands = "bulk-subscribe-commands"
)

// EpochMetadataKey is the gRPC metadata key that carries the writer's fencing
// epoch ("cluster.term") on Write commands.
const EpochMetadataKey = "x-scadad-epoch"

// Command kinds, as counted in metrics and by the simulator.
const (
	KindPing              = "ping"
	KindRead              = "read"
	KindWrite             = "write"
	KindAdviseSupervisory = "advise_supervisory"
	KindAddItemBulk       = "add_item_bulk"
	KindAdviseItemBulk    = "advise_item_bulk"
	KindSubscribeBulk     = "subscribe_bulk"
	KindRemoveItemBulk    = "remove_item_bulk"
	KindUnknown           = "unknown"
)

// CommandKind names the kind of a command for counting.
func CommandKind(c *gatewaypb.MxCommand) string {
	switch c.GetKind().(type) {
	case *gatewaypb.MxCommand_Ping:
		return KindPing
	case *gatewaypb.MxCommand_Read:
		return KindRead
	case *gatewaypb.MxCommand_Write:
		return KindWrite
	case *gatewaypb.MxCommand_AdviseSupervisory:
		return KindAdviseSupervisory
	case *gatewaypb.MxCommand_AddItemBulk:
		return KindAddItemBulk
	case *gatewaypb.MxCommand_AdviseItemBulk:
		return KindAdviseItemBulk
	case *gatewaypb.MxCommand_SubscribeBulk:
		return KindSubscribeBulk
	case *gatewaypb.MxCommand_RemoveItemBulk:
		return KindRemoveItemBulk
	case *gatewaypb.MxCommand_SubscribeAlarms:
		return KindSubscribeAlarms
	default:
		return KindUnknown
	}
}

// IsSubscribeKind reports whether a command kind is part of establishing a
// subscription (what the 2026-08-26 storm was made of).
func IsSubscribeKind(kind string) bool {
	switch kind {
	case KindAddItemBulk, KindAdviseSupervisory, KindAdviseItemBulk, KindSubscribeBulk:
		return true
	}
	return false
}

// ValueToProto converts a Value for the wire.
func ValueToProto(v field.Value) (*gatewaypb.Value, error) {
	switch x := v.(type) {
	case nil:
		return &gatewaypb.Value{}, nil
	case float64:
		return &gatewaypb.Value{Kind: &gatewaypb.Value_DoubleValue{DoubleValue: x}}, nil
	case float32:
		return &gatewaypb.Value{Kind: &gatewaypb.Value_DoubleValue{DoubleValue: float64(x)}}, nil
	case int64:
		return &gatewaypb.Value{Kind: &gatewaypb.Value_IntValue{IntValue: x}}, nil
	case int:
		return &gatewaypb.Value{Kind: &gatewaypb.Value_IntValue{IntValue: int64(x)}}, nil
	case int32:
		return &gatewaypb.Value{Kind: &gatewaypb.Value_IntValue{IntValue: int64(x)}}, nil
	case bool:
		return &gatewaypb.Value{Kind: &gatewaypb.Value_BoolValue{BoolValue: x}}, nil
	case string:
		return &gatewaypb.Value{Kind: &gatewaypb.Value_StringValue{StringValue: x}}, nil
	default:
		return nil, fmt.Errorf("unsupported value type %T", v)
	}
}

// ValueFromProto converts a wire value; an empty value is nil.
func ValueFromProto(v *gatewaypb.Value) field.Value {
	switch x := v.GetKind().(type) {
	case *gatewaypb.Value_DoubleValue:
		return x.DoubleValue
	case *gatewaypb.Value_IntValue:
		return x.IntValue
	case *gatewaypb.Value_BoolValue:
		return x.BoolValue
	case *gatewaypb.Value_StringValue:
		return x.StringValue
	default:
		return nil
	}
}

// DataChange is one value update for an item the client subscribed.
type DataChange struct {
	Tag       string
	Handle    int32
	Value     field.Value
	Quality   field.Quality
	Timestamp time.Time
}

func dataChangeFromProto(d *gatewaypb.DataChange) DataChange {
	ts := time.Time{}
	if d.GetTimestamp() != nil {
		ts = d.GetTimestamp().AsTime()
	}
	return DataChange{
		Tag:       d.GetTagAddress(),
		Handle:    d.GetItemHandle(),
		Value:     ValueFromProto(d.GetValue()),
		Quality:   field.Quality(d.GetQuality()),
		Timestamp: ts,
	}
}

// TimestampToProto is a small helper shared with the simulator.
func TimestampToProto(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// FormatEpoch renders an epoch for the metadata header.
func FormatEpoch(e role.Epoch) string { return e.String() }

// ParseEpoch parses the "cluster.term" form written by FormatEpoch.
func ParseEpoch(s string) (role.Epoch, error) {
	c, t, ok := strings.Cut(s, ".")
	if !ok {
		return role.Epoch{}, fmt.Errorf("parse epoch %q: want cluster.term", s)
	}
	cluster, err := strconv.ParseUint(c, 10, 64)
	if err != nil {
		return role.Epoch{}, fmt.Errorf("parse epoch %q cluster: %w", s, err)
	}
	term, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return role.Epoch{}, fmt.Errorf("parse epoch %q term: %w", s, err)
	}
	return role.Epoch{Cluster: cluster, Term: term}, nil
}

type epochKey struct{}

// WithEpoch returns a context whose Write calls carry epoch e. It overrides
// the client's configured epoch source for that call.
func WithEpoch(ctx context.Context, e role.Epoch) context.Context {
	return context.WithValue(ctx, epochKey{}, e)
}

func epochFrom(ctx context.Context) (role.Epoch, bool) {
	e, ok := ctx.Value(epochKey{}).(role.Epoch)
	return e, ok
}
