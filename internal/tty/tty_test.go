package tty

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestIs(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	closed, err := os.Create(filepath.Join(t.TempDir(), "closed"))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
		want bool
	}{
		{"buffer", &bytes.Buffer{}, false},
		{"regular file", file, false},
		{"pipe", w, false},
		{"closed file", closed, false},
	} {
		if got := Is(tc.w); got != tc.want {
			t.Errorf("%s: Is = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A character device is not a terminal either (the check a bare
	// os.ModeCharDevice test gets wrong).
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if Is(null) {
		t.Errorf("%s: Is = true, want false", os.DevNull)
	}
}
