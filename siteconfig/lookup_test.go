package siteconfig

import (
	"fmt"
	"os"
	"reflect"
	"testing"
)

func TestSubscriptionsGroupByConnectionAndInstance(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	s := mustParse(t, string(data))
	var got []string
	for _, sub := range s.Subscriptions() {
		var names []string
		for _, a := range sub.Attributes {
			names = append(names, a.Name)
		}
		got = append(got, fmt.Sprintf("%s/%s %v", sub.Connection, sub.Instance, names))
	}
	want := []string{
		"gw-line1/Z28061 [Running SpeedSP Speed StartCount]",
		"gw-line2/Z28062 [Running Speed RunHours]",
		"skid-boiler/Boiler1 [SteamPressure DrumLevel Mode]",
		"gw-line1/Boiler1 [BurnerPermit]",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("subscriptions = %q\nwant %q", got, want)
	}
}

func TestLookups(t *testing.T) {
	s := validSite()
	if c, ok := s.Connection("ua"); !ok || c.Kind != KindOPCUA {
		t.Errorf("Connection(ua) = %v, %v", c, ok)
	}
	if in, ok := s.Instance("Skid"); !ok || in.Connection != "ua" {
		t.Errorf("Instance(Skid) = %v, %v", in, ok)
	}
	if tg, ok := s.Target("hist"); !ok || tg.URL == "" {
		t.Errorf("Target(hist) = %v, %v", tg, ok)
	}
	for _, miss := range []bool{
		func() bool { _, ok := s.Connection("x"); return ok }(),
		func() bool { _, ok := s.Instance("x"); return ok }(),
		func() bool { _, ok := s.Target("x"); return ok }(),
	} {
		if miss {
			t.Error("a lookup of an unknown name succeeded")
		}
	}
}
