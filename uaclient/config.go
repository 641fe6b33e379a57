package uaclient

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/uasec"
)

// Config is the set of upstream connections to keep subscribed.
type Config struct {
	// HotStandby also runs the sessions, read-only, on a Standby node.
	HotStandby  bool
	Connections []Connection
}

// Connection is one upstream OPC UA server and the attributes read from it.
type Connection struct {
	Name     string
	Endpoint string // opc.tcp://host:port
	// Client holds the security, identity and the bound of each service
	// call (Timeout).
	Client uasec.ClientOptions
	// PublishingInterval is the subscription's publishing interval.
	PublishingInterval time.Duration
	// BackoffFloor and BackoffMax bound the wait before a session is
	// opened again after a failure.
	BackoffFloor time.Duration
	BackoffMax   time.Duration
	Items        []Item
}

// Item is one site attribute and the upstream node that carries it.
type Item struct {
	Instance  string
	Attribute string
	NodeID    string // ns=<n>;s=... or nsu=<uri>;s=...
}

type itemKey struct{ instance, attribute string }

// equal reports whether o needs no new session: the same settings, key
// and items (a key reloaded from the same file compares equal). Keys are
// compared by value: reflect.DeepEqual also compares the precomputed CRT
// values, which a key parsed from its file does not always share with the
// one generated (about one test run in fifteen said otherwise).
func (c Connection) equal(o Connection) bool {
	mine, theirs := c.Client.PrivateKey, o.Client.PrivateKey
	switch {
	case (mine == nil) != (theirs == nil):
		return false
	case mine != nil && !mine.Equal(theirs):
		return false
	}
	c.Client.PrivateKey, o.Client.PrivateKey = nil, nil
	return reflect.DeepEqual(c, o)
}

// Validate reports every problem, each naming its connection and item.
func (c Config) Validate() error {
	var errs []error
	names := map[string]bool{}
	owner := map[itemKey]string{}
	for i, conn := range c.Connections {
		where := fmt.Sprintf("connection %d (%q)", i, conn.Name)
		if conn.Name == "" {
			errs = append(errs, fmt.Errorf("%s: name required", where))
		} else if names[conn.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate name", where))
		}
		names[conn.Name] = true
		if conn.Endpoint == "" {
			errs = append(errs, fmt.Errorf("%s: endpoint required", where))
		}
		if conn.Client.Timeout <= 0 {
			errs = append(errs, fmt.Errorf("%s: request timeout %v is not positive", where, conn.Client.Timeout))
		}
		if conn.PublishingInterval <= 0 {
			errs = append(errs, fmt.Errorf("%s: publishing interval %v is not positive", where, conn.PublishingInterval))
		}
		if conn.BackoffFloor <= 0 || conn.BackoffMax < conn.BackoffFloor {
			errs = append(errs, fmt.Errorf("%s: backoff %v..%v needs 0 < floor <= max", where, conn.BackoffFloor, conn.BackoffMax))
		}
		for _, it := range conn.Items {
			k := itemKey{it.Instance, it.Attribute}
			if prev, dup := owner[k]; dup {
				errs = append(errs, fmt.Errorf("%s: attribute %s.%s already read on connection %q", where, it.Instance, it.Attribute, prev))
			}
			owner[k] = conn.Name
			if _, err := resolveNodeID(it.NodeID, nil); err != nil {
				errs = append(errs, fmt.Errorf("%s: attribute %s.%s: node id %q: %v", where, it.Instance, it.Attribute, it.NodeID, err))
			}
		}
	}
	return errors.Join(errs...)
}

// resolveNodeID parses an item's NodeId. One written with a namespace URI
// (nsu=...) is resolved against the server's NamespaceArray; with none
// given (validation before any session) only its syntax is checked.
func resolveNodeID(s string, namespaces []string) (*ua.NodeID, error) {
	uri, ok := strings.CutPrefix(s, "nsu=")
	if !ok {
		return ua.ParseNodeID(s)
	}
	if namespaces == nil {
		uri, _, _ = strings.Cut(uri, ";")
		namespaces = []string{uri}
	}
	x, err := ua.ParseExpandedNodeID(s, namespaces)
	if err != nil {
		return nil, err
	}
	return x.NodeID, nil
}
