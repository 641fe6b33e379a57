package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/nodeconfig"
)

// The console format writes no colour codes into a log file, where an
// operator greps it and the codes would split every field.
func TestConsoleLogToAFileHasNoColourCodes(t *testing.T) {
	name := filepath.Join(t.TempDir(), "scadad.log")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	log, err := newLogger(formatted(f, "console"), "info", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn().Str("target", "historian").Msg("delivery failed")
	f.Close()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); strings.Contains(got, "\x1b[") || !strings.Contains(got, "delivery failed") || !strings.Contains(got, "target=historian") {
		t.Fatalf("console log %q: want the message and its field without colour codes", got)
	}
}

func logConfig(dataDir string, file nodeconfig.LogFile) *nodeconfig.Config {
	return &nodeconfig.Config{NodeID: "node-a", DataDir: dataDir, Log: nodeconfig.Log{Level: "info", Format: "console", File: file}}
}

// The log file is rotated at max_size_mib and keeps max_backups renamed
// files; every line in it is JSON whatever log.format says for stderr.
func TestLogFileRotatesBySizeAndKeepsMaxBackups(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "logs", "scadad.log")
	var stderr bytes.Buffer
	log, closeLog, err := openLog(logConfig(dir, nodeconfig.LogFile{Path: path, MaxSizeMiB: 1, MaxBackups: 2, MaxAgeDays: 30}), logOutputs{stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	pad := strings.Repeat("x", 1000)
	for i := range 5000 { // about 5 MiB: four rotations
		log.Info().Int("i", i).Str("pad", pad).Msg("line")
	}
	files := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "logs", "scadad*.log"))
		return m
	}
	testwait.ForDetail(t, 10*time.Second, "old log files pruned to max_backups", func() (bool, string) {
		f := files()
		return len(f) == 3, fmt.Sprint(f)
	})
	for _, f := range files() {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 1<<20 {
			t.Errorf("%s has %d bytes, over max_size_mib 1", f, len(b))
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var v map[string]any
			if err := json.Unmarshal([]byte(line), &v); err != nil || v["message"] != "line" {
				t.Fatalf("%s: line %.80q is not the JSON log line: %v", f, line, err)
			}
		}
	}
	if !strings.Contains(stderr.String(), "INF line") {
		t.Error("stderr did not get the console lines")
	}
}

type eventRecorder struct{ warnings, errors, infos []string }

func (r *eventRecorder) Info(_ uint32, m string) error { r.infos = append(r.infos, m); return nil }
func (r *eventRecorder) Warning(_ uint32, m string) error {
	r.warnings = append(r.warnings, m)
	return nil
}
func (r *eventRecorder) Error(_ uint32, m string) error { r.errors = append(r.errors, m); return nil }

// Under the Windows service manager there is no stderr: the log goes to
// data_dir/log/scadad.log without any log.file setting, and warnings and
// errors to the Event Log as well.
func TestLogWithoutStderrGoesToTheDataDirAndTheEventLog(t *testing.T) {
	dir := t.TempDir()
	events := &eventRecorder{}
	log, closeLog, err := openLog(logConfig(dir, nodeconfig.LogFile{MaxSizeMiB: 100, MaxBackups: 10, MaxAgeDays: 30}), logOutputs{events: events})
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("scadad started")
	log.Warn().Str("http", "0.0.0.0:8080").Msg("http.insecure")
	log.Error().Msg("state storage failed")
	closeLog()
	b, err := os.ReadFile(filepath.Join(dir, "log", "scadad.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 3 || !strings.Contains(string(b), `"message":"scadad started"`) {
		t.Errorf("log file has %d lines: %s", n, b)
	}
	if len(events.warnings) != 1 || !strings.HasPrefix(events.warnings[0], "http.insecure") || len(events.errors) != 1 || len(events.infos) != 0 {
		t.Errorf("events %+v, want the warning and the error only", events)
	}
}

func TestLogFileThatCannotBeWrittenStopsTheStart(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := openLog(logConfig(dir, nodeconfig.LogFile{Path: filepath.Join(blocker, "scadad.log"), MaxSizeMiB: 1}), logOutputs{stderr: &bytes.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "log.file.path") {
		t.Errorf("openLog under a file: %v, want an error naming log.file.path", err)
	}
}
