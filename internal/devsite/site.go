package devsite

import "fmt"

// NamespaceURI is the OPC UA namespace of the demo site's variables.
const NamespaceURI = "urn:scadad:dev"

// HistoryTarget is the store-and-forward target the history rule feeds
// and `scadactl sf enqueue` can use.
const HistoryTarget = "historian"

// SiteConfig is the demo site: two instances whose tags of every type
// move once a second on the embedded gateway, a history rule forwarding
// their changes to the recording sink, and an OPC UA endpoint open to
// anonymous clients (loopback only).
func (l Layout) SiteConfig() []byte {
	return fmt.Appendf(nil, `# The demo site of scadad --dev.
version: 1
name: dev

connections:
  - name: gw
    kind: mxaccess
    mxaccess:
      endpoint: %[1]s

instances:
  - name: Pump1
    connection: gw
    description: Feed pump
    attributes:
      - {name: Running, type: bool, tag: Pump1.Running}
      - {name: Speed, type: double, tag: Pump1.Speed, units: rpm}
      - {name: SpeedSP, type: double, tag: Pump1.SpeedSP, writable: true, units: rpm}
      - {name: Starts, type: int32, tag: Pump1.Starts}
      - {name: Mode, type: string, tag: Pump1.Mode}
  - name: Tank1
    connection: gw
    description: Feed tank
    attributes:
      - {name: Level, type: float, tag: Tank1.Level, units: "%%"}
      - {name: HighAlarm, type: bool, tag: Tank1.HighAlarm}
      - {name: Batch, type: int64, tag: Tank1.Batch}

targets:
  - name: %[2]s
    url: http://%[3]s/%[2]s
    timeout: 5s
    backoff_floor: 500ms
    backoff_max: 10s
    max_attempts: 0          # never park

history:
  - name: demo-history
    target: %[2]s
    select:
      - instance: Pump1
      - instance: Tank1
    mode: on_change
    max_batch: 100
    max_batch_delay: 1s

opcua:
  namespace_uri: %[4]s
  security:
    - {policy: None, mode: None}   # loopback only; see docs/opcua.md
  identities:
    anonymous: true
    anonymous_can_write: true
`, l.GatewayAddr(), HistoryTarget, l.SinkAddr(), NamespaceURI)
}
