package siteconfig

import (
	"fmt"
	"strings"
	"time"
)

// Generate builds a valid, deterministic site of the given size for
// benchmarks and load tests: two MxAccess gateway connections the instances
// alternate between, tagsPerInstance attributes of every data type per
// instance, two store-and-forward targets and a history rule over the
// first instance. 50 instances × 250 tags canonicalise to about 5 MB, the
// size of the deploy benchmark. Values below 1 count as 1.
func Generate(instances, tagsPerInstance int) *Site {
	instances, tagsPerInstance = max(instances, 1), max(tagsPerInstance, 1)
	types := []DataType{TypeDouble, TypeFloat, TypeInt32, TypeInt64, TypeBool, TypeString}
	units := map[DataType]string{TypeDouble: "degC", TypeFloat: "bar", TypeInt32: "count", TypeInt64: "ms"}
	s := &Site{
		Version: CurrentVersion,
		Name:    "generated",
		Connections: []Connection{
			{Name: "gw-a", Kind: KindMxAccess, MxAccess: &MxAccessConnection{Endpoint: "gateway-a.plant.local:5001"}},
			{Name: "gw-b", Kind: KindMxAccess, MxAccess: &MxAccessConnection{Endpoint: "gateway-b.plant.local:5001"}},
		},
		Targets: []Target{
			{Name: "historian", URL: "https://historian.plant.local/api/v1/values"},
			{Name: "mes", URL: "https://mes.plant.local/api/events"},
		},
		OPCUA: OPCUAServer{
			NamespaceURI: "urn:scadad:generated",
			Security:     []SecurityPair{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}},
			Identities:   ServerIdentities{Anonymous: true},
		},
	}
	// A realistic description length is what makes 12,500 tags weigh 5 MB.
	filler := strings.Repeat("Generated for the deploy benchmark; ", 7)
	for i := range instances {
		in := Instance{
			Name:        fmt.Sprintf("Z%05d", 28000+i),
			Connection:  s.Connections[i%2].Name,
			Description: fmt.Sprintf("Generated instance %d", i),
			Attributes:  make([]Attribute, 0, tagsPerInstance),
		}
		for j := range tagsPerInstance {
			t := types[j%len(types)]
			name := fmt.Sprintf("Attr%04d_%s", j, t)
			in.Attributes = append(in.Attributes, Attribute{
				Name:        name,
				Type:        t,
				Tag:         fmt.Sprintf("%s.%s.PV", in.Name, name),
				Writable:    j%10 == 0,
				Description: fmt.Sprintf("Attribute %d of %s. %s", j, in.Name, filler),
				Units:       units[t],
			})
		}
		s.Instances = append(s.Instances, in)
	}
	s.History = []HistoryRule{{
		Name:          "generated-history",
		Target:        "historian",
		Select:        []HistorySelector{{Instance: s.Instances[0].Name}},
		Mode:          HistoryOnChange,
		MaxBatchDelay: 2 * time.Second,
	}}
	s.ApplyDefaults()
	return s
}
