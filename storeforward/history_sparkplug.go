package storeforward

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/storeforward/sparkplug/sparkplugpb"
)

// SparkplugContentType is the Content-Type of a tag history message in
// the Sparkplug format.
const SparkplugContentType = "application/vnd.sparkplug.b+protobuf"

// SparkplugQualityProperty is the metric property carrying a value's OPC
// DA quality code (192 good, 64 uncertain, 0x00-0x3f bad), as Sparkplug
// edge nodes of other makers do.
const SparkplugQualityProperty = "Quality"

// SparkplugSourceLost reports whether m, a metric of a history message,
// says that its attribute's data source is lost: no value, and the
// quality a field source gives every attribute of a connection that went
// bad (OPC DA bad, substatus not connected 0x08 or communication failure
// 0x18: the gateway session lost, an OPC UA client session down, a
// connection removed by a deploy). The Sparkplug kind takes a device
// whose every value says so for dead (DDEATH).
func SparkplugSourceLost(m *sparkplugpb.Payload_Metric) bool {
	if !m.GetIsNull() {
		return false
	}
	props := m.GetProperties()
	for i, k := range props.GetKeys() {
		if k != SparkplugQualityProperty || i >= len(props.GetValues()) {
			continue
		}
		switch props.GetValues()[i].GetIntValue() & 0xFC {
		case 0x08, 0x18:
			return true
		}
	}
	return false
}

// SparkplugMetricName is the name of an attribute's metric in a history
// message: "<instance>/<attribute>" (an instance name holds no '/').
func SparkplugMetricName(instance, attribute string) string { return instance + "/" + attribute }

// SplitSparkplugMetricName undoes SparkplugMetricName.
func SplitSparkplugMetricName(name string) (instance, attribute string, ok bool) {
	return strings.Cut(name, "/")
}

// encodeSparkplugHistory makes a batch's message as a Sparkplug B payload
// with no timestamp or seq of its own: the Sparkplug target sets those when
// it publishes, and without them the same values encode to the same bytes
// (and message id).
func encodeSparkplugHistory(rule HistoryRule, values []HistoryValue) (readyBatch, error) {
	p := &sparkplugpb.Payload{Metrics: make([]*sparkplugpb.Payload_Metric, 0, len(values))}
	for _, v := range values {
		m, err := sparkplugMetric(v)
		if err != nil {
			return readyBatch{values: len(values)}, fmt.Errorf("encode %s/%s: %w", v.Instance, v.Attribute, err)
		}
		p.Metrics = append(p.Metrics, m)
	}
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return readyBatch{values: len(values)}, fmt.Errorf("encode %d values: %w", len(values), err)
	}
	return historyBatch(rule, payload, len(values), SparkplugContentType), nil
}

// splitSparkplugHistory is splitHistory for the Sparkplug format.
func splitSparkplugHistory(b readyBatch) ([2]readyBatch, error) {
	p := &sparkplugpb.Payload{}
	if err := proto.Unmarshal(b.payload, p); err != nil {
		return [2]readyBatch{}, fmt.Errorf("decode batch of %d values: %w", b.values, err)
	}
	var out [2]readyBatch
	mid := len(p.Metrics) / 2
	for i, part := range [2][]*sparkplugpb.Payload_Metric{p.Metrics[:mid], p.Metrics[mid:]} {
		payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(&sparkplugpb.Payload{Metrics: part})
		if err != nil {
			return [2]readyBatch{}, fmt.Errorf("encode half of %d values: %w", b.values, err)
		}
		out[i] = historyBatch(b.rule, payload, len(part), SparkplugContentType)
	}
	return out, nil
}

func sparkplugMetric(v HistoryValue) (*sparkplugpb.Payload_Metric, error) {
	m := &sparkplugpb.Payload_Metric{
		Name:      proto.String(SparkplugMetricName(v.Instance, v.Attribute)),
		Timestamp: proto.Uint64(uint64(max(v.Timestamp.UnixMilli(), 0))),
		Properties: &sparkplugpb.Payload_PropertySet{
			Keys: []string{SparkplugQualityProperty},
			Values: []*sparkplugpb.Payload_PropertyValue{{
				Type:  proto.Uint32(uint32(sparkplugpb.DataType_Int32)),
				Value: &sparkplugpb.Payload_PropertyValue_IntValue{IntValue: uint32(opcQuality(v.Quality))},
			}},
		},
	}
	if err := SetSparkplugValue(m, v.Value); err != nil {
		return nil, err
	}
	return m, nil
}

// SetSparkplugValue sets m's datatype and value from a Go value (nil is
// a null of type Unknown).
func SetSparkplugValue(m *sparkplugpb.Payload_Metric, value any) error {
	dt := sparkplugpb.DataType_Unknown
	switch x := value.(type) {
	case nil:
		m.IsNull = proto.Bool(true)
	case bool:
		dt, m.Value = sparkplugpb.DataType_Boolean, &sparkplugpb.Payload_Metric_BooleanValue{BooleanValue: x}
	case int8:
		dt, m.Value = sparkplugpb.DataType_Int8, &sparkplugpb.Payload_Metric_IntValue{IntValue: uint32(int32(x))}
	case int16:
		dt, m.Value = sparkplugpb.DataType_Int16, &sparkplugpb.Payload_Metric_IntValue{IntValue: uint32(int32(x))}
	case int32:
		dt, m.Value = sparkplugpb.DataType_Int32, &sparkplugpb.Payload_Metric_IntValue{IntValue: uint32(x)}
	case int64:
		dt, m.Value = sparkplugpb.DataType_Int64, &sparkplugpb.Payload_Metric_LongValue{LongValue: uint64(x)}
	case int:
		dt, m.Value = sparkplugpb.DataType_Int64, &sparkplugpb.Payload_Metric_LongValue{LongValue: uint64(x)}
	case uint8:
		dt, m.Value = sparkplugpb.DataType_UInt8, &sparkplugpb.Payload_Metric_IntValue{IntValue: uint32(x)}
	case uint16:
		dt, m.Value = sparkplugpb.DataType_UInt16, &sparkplugpb.Payload_Metric_IntValue{IntValue: uint32(x)}
	case uint32:
		dt, m.Value = sparkplugpb.DataType_UInt32, &sparkplugpb.Payload_Metric_LongValue{LongValue: uint64(x)}
	case uint64:
		dt, m.Value = sparkplugpb.DataType_UInt64, &sparkplugpb.Payload_Metric_LongValue{LongValue: x}
	case uint:
		dt, m.Value = sparkplugpb.DataType_UInt64, &sparkplugpb.Payload_Metric_LongValue{LongValue: uint64(x)}
	case float32:
		dt, m.Value = sparkplugpb.DataType_Float, &sparkplugpb.Payload_Metric_FloatValue{FloatValue: x}
	case float64:
		dt, m.Value = sparkplugpb.DataType_Double, &sparkplugpb.Payload_Metric_DoubleValue{DoubleValue: x}
	case string:
		dt, m.Value = sparkplugpb.DataType_String, &sparkplugpb.Payload_Metric_StringValue{StringValue: x}
	case time.Time:
		dt, m.Value = sparkplugpb.DataType_DateTime, &sparkplugpb.Payload_Metric_LongValue{LongValue: uint64(max(x.UnixMilli(), 0))}
	case []byte:
		dt, m.Value = sparkplugpb.DataType_Bytes, &sparkplugpb.Payload_Metric_BytesValue{BytesValue: x}
	default:
		return fmt.Errorf("value of type %T has no Sparkplug data type", value)
	}
	m.Datatype = proto.Uint32(uint32(dt))
	return nil
}

// opcQuality turns a history quality ("good", "uncertain", "bad(0xNN)")
// back into its OPC DA quality code; anything else is bad (0).
func opcQuality(q string) int32 {
	switch q {
	case "good":
		return 0xC0
	case "uncertain":
		return 0x40
	}
	if hex, ok := strings.CutPrefix(q, "bad(0x"); ok {
		if n, err := strconv.ParseUint(strings.TrimSuffix(hex, ")"), 16, 8); err == nil {
			return int32(n)
		}
	}
	return 0
}

// SparkplugDataTypeOf is the Sparkplug data type of a site config
// attribute type (bool, int32, int64, float, double, string), Unknown
// for another.
func SparkplugDataTypeOf(siteType string) sparkplugpb.DataType {
	switch siteType {
	case "bool":
		return sparkplugpb.DataType_Boolean
	case "int32":
		return sparkplugpb.DataType_Int32
	case "int64":
		return sparkplugpb.DataType_Int64
	case "float":
		return sparkplugpb.DataType_Float
	case "double":
		return sparkplugpb.DataType_Double
	case "string":
		return sparkplugpb.DataType_String
	}
	return sparkplugpb.DataType_Unknown
}
