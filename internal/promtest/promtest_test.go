package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"target"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Help: "h"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("a").Add(2)
	c.WithLabelValues("b").Add(5)
	g.Set(-1.5)
	h.Observe(1)
	h.Observe(2)
	tests := []struct {
		name, label string
		want        float64
		ok          bool
	}{
		{"c_total", "a", 2, true},
		{"c_total", "b", 5, true},
		{"c_total", "zzz", 0, false},
		{"g", "", -1.5, true},
		{"h", "", 2, true},
		{"missing", "", 0, false},
	}
	for _, tt := range tests {
		got, ok, err := Value(reg, tt.name, tt.label)
		if err != nil || got != tt.want || ok != tt.ok {
			t.Errorf("Value(%s, %q) = %v, %v, %v; want %v, %v", tt.name, tt.label, got, ok, err, tt.want, tt.ok)
		}
	}
}
