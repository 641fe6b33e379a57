// Package promtest reads gathered Prometheus metrics for tests: one series'
// value, found by metric name and a label value. It owns nothing else and
// is imported only by tests.
package promtest

import "github.com/prometheus/client_golang/prometheus"

// Value is the value of the first series of metric name that has a label
// whose value is label ("" matches the first series): a counter's or
// gauge's value, or a histogram's sample count. ok is false when there is
// no such series.
func Value(g prometheus.Gatherer, name, label string) (v float64, ok bool, err error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true, nil
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true, nil
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true, nil
			}
		}
	}
	return 0, false, nil
}
