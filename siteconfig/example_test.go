package siteconfig_test

import (
	"fmt"
	"strings"

	"github.com/scadad/scadad/siteconfig"
)

const site = `version: 1
name: demo
connections:
  - name: gw
    kind: mxaccess
    mxaccess: {endpoint: "gw.local:5001"}
instances:
  - name: Pump1
    connection: gw
    attributes:
      - {name: Speed, type: double, tag: Pump1.Speed}
opcua:
  namespace_uri: urn:demo
  security: [{policy: None, mode: None}]
  identities: {anonymous: true}
`

// A worker follows the holder and reconfigures by difference.
func ExampleHolder() {
	holder := siteconfig.NewHolder()
	updates, stop := holder.Watch()
	defer stop()

	// The node applies deploys as they commit.
	if err := holder.SetArtifact([]byte(site), 1); err != nil {
		fmt.Println(err)
	}
	next := strings.Replace(site, `{endpoint: "gw.local:5001"}`, `{endpoint: "gw.local:5001", command_timeout: 30s}`, 1)
	if err := holder.SetArtifact([]byte(next), 2); err != nil {
		fmt.Println(err)
	}
	// An unreadable artifact is no answer: revision 2 stays current.
	fmt.Println(holder.SetArtifact(nil, 3) != nil)

	// This worker was slow: it gets the newest revision, 2, with every
	// change since what it last had, which was nothing.
	u := <-updates
	fmt.Println("revision", u.Revision)
	for _, c := range u.Changes.Connections {
		fmt.Println(c.Kind, "connection", c.Name)
	}
	// Output:
	// true
	// revision 2
	// added connection gw
}

func ExampleDiff() {
	old, _ := siteconfig.Parse([]byte(site))
	new, _ := siteconfig.Parse([]byte(strings.Replace(site, "tag: Pump1.Speed}", "tag: Pump1.Speed.PV, units: rpm}", 1)))
	fmt.Print(siteconfig.Diff(old, new))
	// Output:
	// ~ instance Pump1
	//     ~ attribute Speed
	//         tag: "Pump1.Speed" -> "Pump1.Speed.PV"
	//         + units: "rpm"
}
