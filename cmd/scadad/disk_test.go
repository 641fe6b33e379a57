package main

import (
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scadad/scadad/internal/promtest"
)

func TestDiskSpaceOfTheDataDir(t *testing.T) {
	dir := t.TempDir()
	free, size, err := diskSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	if size == 0 || free > size {
		t.Fatalf("free %d of %d bytes", free, size)
	}
	if _, _, err := diskSpace(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("disk space of a missing dir: no error")
	}

	reg := prometheus.NewRegistry()
	if err := registerDiskSpace(reg, dir); err != nil {
		t.Fatal(err)
	}
	gotSize, ok, err := promtest.Value(reg, "scadad_data_dir_size_bytes", "")
	if err != nil || !ok || gotSize != float64(size) {
		t.Fatalf("scadad_data_dir_size_bytes = %v (%v, %v), want %d", gotSize, ok, err, size)
	}
	gotFree, ok, err := promtest.Value(reg, "scadad_data_dir_free_bytes", "")
	if err != nil || !ok || gotFree <= 0 || gotFree > gotSize {
		t.Fatalf("scadad_data_dir_free_bytes = %v (%v, %v) of %v", gotFree, ok, err, gotSize)
	}
}
