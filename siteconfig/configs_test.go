package siteconfig

import (
	"os"
	"testing"
)

func TestShippedSiteConfigsParse(t *testing.T) {
	for _, f := range []string{"../configs/site-example.yaml", "../configs/site-local.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
