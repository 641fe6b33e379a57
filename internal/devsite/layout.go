package devsite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/pki"
)

// DefaultBase is the port the layout counts from: the first node's Raft,
// control API and HTTP listeners are 7101, 7201 and 7301, where scadactl
// and the quick start look by default.
const DefaultBase = 7100

// The client certificates the demo issues: an admin for scadactl and the
// status page, a producer for the HTTP enqueue endpoint.
const (
	Operator = "operator"
	Producer = "producer"
)

// certValidity is how long the demo's certificates last; the CA outlives
// them so that `scadactl certs issue` can renew one.
const (
	certValidity = 825 * 24 * time.Hour
	caValidity   = 3650 * 24 * time.Hour
)

const (
	siteName       = "scadad-dev"
	certsFolder    = "certs"
	sinkRecordFile = "sink.jsonl"
)

// Layout is where the demo site lives: a folder, the first port and how
// many nodes (1: one voter; 3: two voters and a witness).
type Layout struct {
	Dir   string
	Base  int
	Nodes int
}

// Check reports what is wrong with the layout, if anything.
func (l Layout) Check() error {
	if l.Nodes != 1 && l.Nodes != 3 {
		return fmt.Errorf("--nodes %d: a dev site has 1 node (one voter) or 3 (two voters and a witness)", l.Nodes)
	}
	if l.Base < 1024 || l.Base+span > 65535 {
		return fmt.Errorf("--dev-port-base %d: the dev site uses ports %d..%d, which must lie within 1024..65535", l.Base, l.Base, l.Base+span)
	}
	return nil
}

// span is how far above Base the layout's ports reach.
const span = 402

// Addrs are every address the site listens on, named for a message
// about one that is taken.
func (l Layout) Addrs() map[string]string {
	out := map[string]string{"gateway simulator": l.GatewayAddr(), "recording sink": l.SinkAddr()}
	for i, m := range l.Members() {
		out[m.ID+" raft"] = m.RaftAddr
		out[m.ID+" control API"] = m.APIAddr
		out[m.ID+" HTTP"] = l.HTTPAddr(i)
		if m.OPCUA != "" {
			out[m.ID+" OPC UA"] = strings.TrimPrefix(m.OPCUA, "opc.tcp://")
		}
	}
	return out
}

// NodeIDs names the nodes; the one-node site keeps the name earlier
// releases gave it, so an existing dev folder starts again as it was.
func (l Layout) NodeIDs() []string {
	if l.Nodes == 1 {
		return []string{"dev"}
	}
	return []string{"dev-a", "dev-b", "dev-witness"}
}

// Members is the cluster membership: node i's Raft, API, HTTP and OPC UA
// listeners are Base+1+i, Base+101+i, Base+201+i and Base+301+i; the
// witness of a three-node site serves no OPC UA.
func (l Layout) Members() []nodeconfig.Member {
	ids := l.NodeIDs()
	members := make([]nodeconfig.Member, len(ids))
	for i, id := range ids {
		m := nodeconfig.Member{ID: id, RaftAddr: l.addr(1 + i), APIAddr: l.addr(101 + i)}
		if l.Nodes == 3 && i == 2 {
			m.Witness = true
		} else {
			m.OPCUA = "opc.tcp://" + l.addr(301+i)
		}
		members[i] = m
	}
	return members
}

// HTTPAddr is node i's HTTP listener (health, metrics, enqueue, status page).
func (l Layout) HTTPAddr(i int) string { return l.addr(201 + i) }

// GatewayAddr is where the embedded gateway simulator listens.
func (l Layout) GatewayAddr() string { return l.addr(401) }

// SinkAddr is where the embedded recording sink listens.
func (l Layout) SinkAddr() string { return l.addr(402) }

// SinkRecord is the file the sink appends every delivery to.
func (l Layout) SinkRecord() string { return filepath.Join(l.Dir, sinkRecordFile) }

// CertsDir holds the site CA and every certificate of the demo.
func (l Layout) CertsDir() string { return filepath.Join(l.Dir, certsFolder) }

// APIAddrs are the nodes' control API addresses, as SCADACTL_ENDPOINTS
// takes them.
func (l Layout) APIAddrs() []string {
	var out []string
	for _, m := range l.Members() {
		out = append(out, m.APIAddr)
	}
	return out
}

func (l Layout) addr(offset int) string { return fmt.Sprintf("127.0.0.1:%d", l.Base+offset) }

// Configs makes (once) the site's certificates under Dir and returns every
// node's config: a CA, one certificate per node, an operator (admin) for
// scadactl and a producer for the HTTP enqueue endpoint. Certificates
// already there are kept.
func (l Layout) Configs() ([]*nodeconfig.Config, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("dev data dir: %w", err)
	}
	l.Dir = dir
	if err := l.certificates(); err != nil {
		return nil, err
	}
	mode := nodeconfig.ModeStrict
	if l.Nodes == 3 {
		mode = nodeconfig.ModeWitness
	}
	members := l.Members()
	certs := l.CertsDir()
	var out []*nodeconfig.Config
	for i, m := range members {
		c := &nodeconfig.Config{
			NodeID:  m.ID,
			DataDir: filepath.Join(dir, "data", m.ID),
			Cluster: nodeconfig.Cluster{Mode: mode, Members: members},
			TLS: nodeconfig.TLS{CA: filepath.Join(certs, "ca.crt"),
				Cert: filepath.Join(certs, m.ID+".crt"), Key: filepath.Join(certs, m.ID+".key")},
			// The status page opens to a browser on this machine, with no
			// client certificate to import.
			HTTP: nodeconfig.HTTP{Listen: l.HTTPAddr(i), ConsoleLoopbackOperators: true},
			Log:  nodeconfig.Log{Format: "console"},
			// The nodes share one process and so one Go runtime, whose
			// memory limit must hold them all: at one node's limit the
			// collector runs without pause and heartbeats miss.
			Runtime: nodeconfig.Runtime{MemoryLimitMiB: l.Nodes * nodeconfig.DefaultMemoryLimitMiB},
		}
		c.ApplyDefaults()
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("dev config of %s: %w", m.ID, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func (l Layout) certificates() error {
	certs := l.CertsDir()
	if _, err := os.Stat(filepath.Join(certs, "ca.crt")); errors.Is(err, os.ErrNotExist) {
		if err := pki.Init(certs, siteName, nil, []string{Operator}, certValidity, pki.WithCAValidity(caValidity)); err != nil {
			return fmt.Errorf("dev certificates: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("dev certificates: %w", err)
	}
	issue := func(name string, usage pki.Usage, role pki.Role) error {
		if _, err := os.Stat(filepath.Join(certs, name+".crt")); err == nil || !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := pki.Issue(certs, name, usage, role, certValidity, false); err != nil {
			return fmt.Errorf("dev certificate of %s: %w", name, err)
		}
		return nil
	}
	for _, id := range l.NodeIDs() {
		if err := issue(id, pki.NodeUsage, pki.RoleNone); err != nil {
			return err
		}
	}
	// A producer certificate for curl: the HTTP listener is HTTPS and
	// takes enqueues from certificates whose role allows it.
	return issue(Producer, pki.ClientUsage, pki.RoleProducer)
}
