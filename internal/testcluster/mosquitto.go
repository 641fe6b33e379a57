//go:build linux

package testcluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/scadad/scadad/pki"
)

// Mosquitto is an MQTT broker of a test's own: Debian's mosquitto on a
// free loopback port with its own configuration, a password file (user
// "scadad", password in PasswordFile) and persistence, so that a restart
// (Stop, Start) keeps queued messages of persistent sessions. It runs as
// nobody when the test runs as root.
type Mosquitto struct {
	URL          string // mqtt://127.0.0.1:port
	Port         int
	Username     string
	Password     string
	PasswordFile string // the password alone, as a target reads it
	dir, conf    string
	cred         *syscall.Credential
	cmd          *exec.Cmd
	exited       chan struct{}
	logPath      string

	// With MosquittoOptions.TLS: a second listener, TLS only with a
	// client certificate, and the files a client needs for it.
	TLSURL                    string // tls://127.0.0.1:port
	CAFile, CertFile, KeyFile string
}

// MosquittoOptions change StartMosquittoWith's broker.
type MosquittoOptions struct {
	// TLS adds a listener requiring TLS and a client certificate of a CA
	// made for the broker (server certificate for 127.0.0.1).
	TLS bool
	// DenyTopics are topic filters user scadad may not publish to (an ACL
	// file; everything else is allowed).
	DenyTopics []string
	// LogAll logs every packet (log_type all) to the broker's log.
	LogAll bool
	// ReceiveMaximum is the QoS 1 publishes a client may have awaiting
	// their PUBACK (max_inflight_messages, the receive maximum of an MQTT
	// 5 CONNACK); 0: Mosquitto's default, 20.
	ReceiveMaximum int
}

// StartMosquitto writes the broker's configuration under dir and starts it.
func StartMosquitto(dir string) (*Mosquitto, error) {
	return StartMosquittoWith(dir, MosquittoOptions{})
}

// TestingT is what StartRecordedMosquitto uses of a *testing.T (an
// interface, so that the benchmark binaries linking this package do not
// link package testing).
type TestingT interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Fatal(args ...any)
}

// StartRecordedMosquitto starts a broker of t's own (in t.TempDir) and a
// recorder subscribed to filter as clientID, both stopped when t ends; it
// fails t when either cannot start. It is the set-up of every test that
// watches what reaches a broker.
func StartRecordedMosquitto(t TestingT, o MosquittoOptions, clientID, filter string) (*Mosquitto, *MQTTRecorder) {
	t.Helper()
	broker, err := StartMosquittoWith(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Stop)
	rec, err := broker.Subscribe(clientID, filter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	return broker, rec
}

// StartMosquittoWith is StartMosquitto with options.
func StartMosquittoWith(dir string, o MosquittoOptions) (*Mosquitto, error) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		return nil, fmt.Errorf("mosquitto not found (apt-get install mosquitto; .ci/run does): %w", err)
	}
	passwd, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		return nil, fmt.Errorf("mosquitto_passwd not found: %w", err)
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(dir, "mqtt-")
	if err != nil {
		return nil, err
	}
	m := &Mosquitto{Port: ports[0], Username: "scadad", Password: "pw-" + strconv.FormatInt(time.Now().UnixNano(), 36), dir: root}
	m.URL = fmt.Sprintf("mqtt://127.0.0.1:%d", m.Port)
	m.PasswordFile = filepath.Join(root, "password")
	m.logPath = filepath.Join(root, "mosquitto.log")
	if err := os.WriteFile(m.PasswordFile, []byte(m.Password+"\n"), 0o600); err != nil {
		return nil, err
	}
	users := filepath.Join(root, "users")
	if out, err := exec.Command(passwd, "-b", "-c", users, m.Username, m.Password).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mosquitto_passwd: %w\n%s", err, out)
	}
	m.conf = filepath.Join(root, "mosquitto.conf")
	conf := fmt.Sprintf(`listener %d 127.0.0.1
allow_anonymous false
password_file %s
persistence true
persistence_location %s/
autosave_interval 1
max_queued_messages 0
log_dest stderr
`, m.Port, users, root)
	if o.LogAll {
		conf += "log_type all\n"
	}
	if o.ReceiveMaximum > 0 {
		conf += fmt.Sprintf("max_inflight_messages %d\n", o.ReceiveMaximum)
	}
	owned := []string{root, users}
	if o.TLS {
		files, err := mosquittoTLS(root)
		if err != nil {
			return nil, err
		}
		m.TLSURL = fmt.Sprintf("tls://127.0.0.1:%d", ports[1])
		m.CAFile, m.CertFile, m.KeyFile = files[0], files[3], files[4]
		conf += fmt.Sprintf("listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\nrequire_certificate true\n", ports[1], files[0], files[1], files[2])
		owned = append(owned, files[0], files[1], files[2])
	}
	if len(o.DenyTopics) > 0 {
		acl := filepath.Join(root, "acl")
		text := "user " + m.Username + "\ntopic readwrite #\n"
		for _, d := range o.DenyTopics {
			text += "topic deny " + d + "\n"
		}
		if err := os.WriteFile(acl, []byte(text), 0o644); err != nil {
			return nil, err
		}
		conf += "acl_file " + acl + "\n"
	}
	if err := os.WriteFile(m.conf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		m.cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		for d := root; d != "/" && d != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				return nil, err
			}
		}
		for _, f := range owned {
			if err := os.Chown(f, 65534, 65534); err != nil {
				return nil, err
			}
		}
	}
	m.cmd = nil
	if err := m.start(bin); err != nil {
		return nil, err
	}
	return m, nil
}

// mosquittoTLS writes a CA, the broker's certificate and key, and a
// client certificate and key under root: ca, server cert, server key,
// client cert, client key.
func mosquittoTLS(root string) ([5]string, error) {
	var files [5]string
	ca, err := pki.GenerateCA("mqtt-test", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		return files, err
	}
	server, err := ca.IssueNode("broker", 24*time.Hour)
	if err != nil {
		return files, err
	}
	client, err := ca.IssueClient("scadad", 24*time.Hour)
	if err != nil {
		return files, err
	}
	for i, f := range []struct {
		name string
		pem  []byte
	}{{"ca.pem", ca.CertPEM}, {"server.pem", server.CertPEM}, {"server.key", server.KeyPEM}, {"client.pem", client.CertPEM}, {"client.key", client.KeyPEM}} {
		files[i] = filepath.Join(root, f.name)
		if err := os.WriteFile(files[i], f.pem, 0o600); err != nil {
			return files, err
		}
	}
	return files, nil
}

// Start runs the broker again after Stop.
func (m *Mosquitto) Start() error {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		return err
	}
	return m.start(bin)
}

func (m *Mosquitto) start(bin string) error {
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "-c", m.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: m.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start mosquitto: %w", err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(exited)
	}(m.exited)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", m.Port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-m.exited:
			log, _ := os.ReadFile(m.logPath)
			return fmt.Errorf("mosquitto exited at start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mosquitto not listening after 20 s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the broker (SIGTERM: it saves its persistence file) and waits.
func (m *Mosquitto) Stop() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
	}
	m.cmd = nil
}

// Log returns what the broker has logged so far (each connection with
// its client id and protocol: "as <id> (p5, ..." for MQTT 5, p2 for
// 3.1.1), across its restarts.
func (m *Mosquitto) Log() (string, error) {
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		return "", fmt.Errorf("read the broker's log: %w", err)
	}
	return string(b), nil
}

// MQTTRecorder is a subscriber with a persistent session (QoS 1, clean
// start off, an hour's session expiry) that records the message id user
// property of every message it receives, in arrival order.
type MQTTRecorder struct {
	cm       *autopaho.ConnectionManager
	cancel   context.CancelFunc
	mu       sync.Mutex
	ids      []string
	topics   []string
	payloads [][]byte
}

// MQTTMessage is one message a recorder received.
type MQTTMessage struct {
	Topic   string
	Payload []byte
}

// Subscribe connects a recorder to m as user scadad, subscribed to filter.
func (m *Mosquitto) Subscribe(clientID, filter string) (*MQTTRecorder, error) {
	u, err := url.Parse(m.URL)
	if err != nil {
		return nil, err
	}
	r := &MQTTRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	subscribed := make(chan error, 1)
	cfg := autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 20, SessionExpiryInterval: 3600,
		ConnectUsername: m.Username, ConnectPassword: []byte(m.Password),
		ReconnectBackoff: func(int) time.Duration { return 200 * time.Millisecond },
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ack *paho.Connack) {
			if ack.SessionPresent {
				return
			}
			go func() {
				sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
				defer scancel()
				_, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
				select {
				case subscribed <- err:
				default:
				}
			}()
		},
		ClientConfig: paho.ClientConfig{
			ClientID: clientID,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				id := ""
				if pr.Packet.Properties != nil {
					id = pr.Packet.Properties.User.Get("message-id")
				}
				r.mu.Lock()
				r.ids = append(r.ids, id)
				r.topics = append(r.topics, pr.Packet.Topic)
				r.payloads = append(r.payloads, pr.Packet.Payload)
				r.mu.Unlock()
				return true, nil
			}},
		},
	}
	r.cm, err = autopaho.NewConnection(ctx, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	select {
	case err := <-subscribed:
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("subscribe %s: %w", filter, err)
		}
	case <-time.After(20 * time.Second):
		r.Close()
		return nil, fmt.Errorf("subscribe %s: not connected after 20 s", filter)
	}
	return r, nil
}

// IDs returns the message ids received so far, in arrival order, and
// their topics.
func (r *MQTTRecorder) IDs() (ids, topics []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...), append([]string(nil), r.topics...)
}

// Len is how many messages the recorder received so far.
func (r *MQTTRecorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// Messages returns the messages received so far, in arrival order.
func (r *MQTTRecorder) Messages() []MQTTMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]MQTTMessage, len(r.topics))
	for i := range r.topics {
		out[i] = MQTTMessage{Topic: r.topics[i], Payload: r.payloads[i]}
	}
	return out
}

// Publish publishes payload to topic at QoS 1 through the recorder's
// connection (a test playing a Sparkplug host application's STATE).
func (r *MQTTRecorder) Publish(ctx context.Context, topic string, payload []byte, retain bool) error {
	resp, err := r.cm.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: payload, Retain: retain})
	if err == nil && resp != nil && resp.ReasonCode >= 0x80 {
		err = fmt.Errorf("publish %s: reason code 0x%02x", topic, resp.ReasonCode)
	}
	return err
}

// Close disconnects the recorder.
func (r *MQTTRecorder) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.cm.Disconnect(ctx)
	r.cancel()
}
