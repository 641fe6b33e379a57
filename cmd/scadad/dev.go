package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/pki"
)

// Dev-mode listeners: fixed loopback ports so scadactl's defaults find the
// node without flags.
const (
	devRaftAddr = "127.0.0.1:7101"
	devAPIAddr  = "127.0.0.1:7201"
	devHTTPAddr = "127.0.0.1:7301"
)

// devConfig makes (once) a one-node site under dir: a CA, a node, an
// operator (admin) and a producer certificate, and returns a config pointing at them. A one-voter
// cluster elects itself at once; nothing else is needed.
func devConfig(dir string) (*nodeconfig.Config, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("dev data dir: %w", err)
	}
	certs := filepath.Join(dir, "certs")
	if _, err := os.Stat(filepath.Join(certs, "ca.crt")); errors.Is(err, os.ErrNotExist) {
		if err := pki.Init(certs, "scadad-dev", []string{"dev"}, []string{"operator"}, 825*24*time.Hour, pki.WithCAValidity(3650*24*time.Hour)); err != nil {
			return nil, fmt.Errorf("dev certificates: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("dev certificates: %w", err)
	}
	// A producer certificate for curl: the HTTP listener is HTTPS and
	// takes enqueues from certificates whose role allows it.
	if _, err := os.Stat(filepath.Join(certs, "producer.crt")); errors.Is(err, os.ErrNotExist) {
		if err := pki.Issue(certs, "producer", pki.ClientUsage, pki.RoleProducer, 825*24*time.Hour, false); err != nil {
			return nil, fmt.Errorf("dev producer certificate: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("dev certificates: %w", err)
	}
	c := &nodeconfig.Config{
		NodeID:  "dev",
		DataDir: filepath.Join(dir, "data"),
		Cluster: nodeconfig.Cluster{
			Mode:    nodeconfig.ModeStrict,
			Members: []nodeconfig.Member{{ID: "dev", RaftAddr: devRaftAddr, APIAddr: devAPIAddr}},
		},
		TLS:  nodeconfig.TLS{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "dev.crt"), Key: filepath.Join(certs, "dev.key")},
		HTTP: nodeconfig.HTTP{Listen: devHTTPAddr, ConsoleLoopbackOperators: true},
		Log:  nodeconfig.Log{Format: "console"},
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("dev config: %w", err)
	}
	return c, nil
}
