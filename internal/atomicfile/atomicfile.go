// Package atomicfile writes files so that a crash or a failed write leaves
// either the old file or the whole new one under the name, never a part:
// a temporary file beside the target, fsync, rename, fsync of the folder.
// It owns only that; callers own what goes in the file and its folder.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// Write puts data at path with perm.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return f.Commit()
}

// File is a temporary file that becomes path on Commit. Close without
// Commit removes it, so `defer f.Close()` cleans up every failed path.
type File struct {
	*os.File
	path      string
	committed bool
}

// Create opens a temporary file beside path with perm, to be written (and
// read back or seeked: it is an *os.File) and then committed.
func Create(path string, perm os.FileMode) (*File, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("create a temporary file for %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil && runtime.GOOS != "windows" {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("set the mode of %s: %w", tmp.Name(), err)
	}
	return &File{File: tmp, path: path}, nil
}

// Commit syncs the file, closes it and renames it to its path, then syncs
// the folder so the rename survives a power loss.
func (f *File) Commit() error {
	if err := f.File.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	if err := f.File.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), f.path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("put %s in place: %w", f.path, err)
	}
	f.committed = true
	return SyncDir(filepath.Dir(f.path))
}

// Close abandons an uncommitted file (removes it); after Commit it does
// nothing.
func (f *File) Close() error {
	if f.committed {
		return nil
	}
	f.File.Close()
	if err := os.Remove(f.Name()); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove %s: %w", f.Name(), err)
	}
	return nil
}

// SyncDir makes a rename or removal in dir durable. Windows cannot sync a
// folder; the rename itself is what there is.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
