package main

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// registerDiskSpace adds scadad_data_dir_free_bytes and
// scadad_data_dir_size_bytes for the file system that holds dir, read at
// each scrape. The buffer lives there: a target down for days fills it,
// and a full disk makes enqueues on this node fail (and whatever else
// shares the disk), so an operator should hear about it first
// (ScadadDataDiskLow).
func registerDiskSpace(reg prometheus.Registerer, dir string) error {
	read := func(pick func(free, size uint64) uint64) func() float64 {
		return func() float64 {
			free, size, err := diskSpace(dir)
			if err != nil {
				return math.NaN()
			}
			return float64(pick(free, size))
		}
	}
	free := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "scadad_data_dir_free_bytes",
		Help: "Bytes free to scadad on the file system of its data dir (NaN when it cannot be read).",
	}, read(func(free, _ uint64) uint64 { return free }))
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "scadad_data_dir_size_bytes",
		Help: "Size in bytes of the file system of scadad's data dir (NaN when it cannot be read).",
	}, read(func(_, size uint64) uint64 { return size }))
	for _, c := range []prometheus.Collector{free, size} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
