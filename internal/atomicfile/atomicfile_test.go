package atomicfile

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestWriteReplacesWholeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new contents" {
		t.Fatalf("read %q, %v", got, err)
	}
	if runtime.GOOS != "windows" {
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, want 0600", st.Mode().Perm())
		}
	}
	assertOnly(t, dir, "key.pem")
}

func TestAbandonedFileLeavesTheOldOne(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "site.snap")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "old" {
		t.Fatalf("the old file became %q", got)
	}
	assertOnly(t, dir, "site.snap")
}

func TestWriteIntoAMissingFolderFails(t *testing.T) {
	if err := Write(filepath.Join(t.TempDir(), "no", "such", "f"), []byte("x"), 0o644); err == nil {
		t.Fatal("no error for a missing folder")
	}
}

func assertOnly(t *testing.T, dir string, want string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != want {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("folder holds %v, want only %s", names, want)
	}
}
