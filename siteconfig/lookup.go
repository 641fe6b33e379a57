package siteconfig

// Connection returns the named connection.
func (s *Site) Connection(name string) (*Connection, bool) {
	for i := range s.Connections {
		if s.Connections[i].Name == name {
			return &s.Connections[i], true
		}
	}
	return nil, false
}

// Instance returns the named instance.
func (s *Site) Instance(name string) (*Instance, bool) {
	for i := range s.Instances {
		if s.Instances[i].Name == name {
			return &s.Instances[i], true
		}
	}
	return nil, false
}

// Target returns the named store-and-forward target.
func (s *Site) Target(name string) (*Target, bool) {
	for i := range s.Targets {
		if s.Targets[i].Name == name {
			return &s.Targets[i], true
		}
	}
	return nil, false
}

// ConnectionOf returns the connection an attribute of in is read through:
// its own override, else the instance's.
func (in *Instance) ConnectionOf(a *Attribute) string {
	if a.Connection != "" {
		return a.Connection
	}
	return in.Connection
}

// Subscription is the unit a subscribe worker guards: the attributes of
// one instance read through one connection.
type Subscription struct {
	Connection string
	Instance   string
	Attributes []Attribute
}

// Subscriptions groups every attribute by (connection, instance), in
// instance order and, within an instance, in order of first appearance of
// each connection.
func (s *Site) Subscriptions() []Subscription {
	var out []Subscription
	for i := range s.Instances {
		in := &s.Instances[i]
		first := len(out)
		for j := range in.Attributes {
			a := &in.Attributes[j]
			conn := in.ConnectionOf(a)
			k := first
			for k < len(out) && out[k].Connection != conn {
				k++
			}
			if k == len(out) {
				out = append(out, Subscription{Connection: conn, Instance: in.Name})
			}
			out[k].Attributes = append(out[k].Attributes, *a)
		}
	}
	return out
}
