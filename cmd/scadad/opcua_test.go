package main

import (
	"strings"
	"testing"

	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/siteconfig"
)

func TestOwnOPCUACheck(t *testing.T) {
	members := []nodeconfig.Member{
		{ID: "node-a", OPCUA: "opc.tcp://Node-A.lan:4840"},
		{ID: "node-b", OPCUA: "opc.tcp://10.0.0.2:4840"},
		{ID: "witness", Witness: true},
	}
	check := ownOPCUACheck(members)
	site := func(endpoints ...string) *siteconfig.Site {
		s := &siteconfig.Site{Connections: []siteconfig.Connection{{Name: "gw", Kind: siteconfig.KindMxAccess, MxAccess: &siteconfig.MxAccessConnection{Endpoint: "10.0.0.2:4840"}}}}
		for i, ep := range endpoints {
			s.Connections = append(s.Connections, siteconfig.Connection{Name: "plc" + string(rune('1'+i)), Kind: siteconfig.KindOPCUA, OPCUA: &siteconfig.OPCUAConnection{Endpoint: ep}})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		site *siteconfig.Site
		want []string // substrings of the error; none: accepted
	}{
		{"upstream servers only", site("opc.tcp://10.0.0.9:4840", "opc.tcp://10.0.0.2:4841"), nil},
		{"a member's own server", site("opc.tcp://10.0.0.9:4840", "opc.tcp://10.0.0.2:4840/path"), []string{"connections[2] (plc2)", "node-b's own OPC UA server"}},
		{"host names compare without case", site("opc.tcp://node-a.LAN:4840"), []string{"connections[1] (plc1)", "node-a's own"}},
		{"both named", site("opc.tcp://node-a.lan:4840", "opc.tcp://10.0.0.2:4840"), []string{"node-a's own", "node-b's own"}},
		{"an unparsable endpoint is siteconfig's to report", site("not a url"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(tc.site)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}
