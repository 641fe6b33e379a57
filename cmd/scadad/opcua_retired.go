package main

import (
	"errors"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/siteconfig"
)

// warnRetiredTrustFolder warns, at each start of the OPC UA server, of
// certificates left in the per-node trusted folder that v0.1.0 read and
// this release does not: the clients they trusted are refused until the
// folder is imported into the replicated trust store. Never silent about a
// file an operator put there.
func warnRetiredTrustFolder(log zerolog.Logger, dir string) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		log.Warn().Err(err).Str("folder", dir).Msg("cannot list the per-node OPC UA trusted folder, which this release no longer reads; if it holds certificates, move them with scadactl opcua trust import " + dir)
		return
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		return
	}
	log.Warn().Str("folder", dir).Strs("files", files).
		Msg("the per-node OPC UA trusted folder is no longer read (since v0.2.0): the client certificates in it are refused; move them into the replicated trust store with scadactl opcua trust import " + dir + ", then empty the folder")
}

// warnRetiredSiteFields warns of what the deployed site config names that
// this release no longer reads (a push of it would be refused now; this
// one was deployed before the upgrade).
func warnRetiredSiteFields(log zerolog.Logger, site *siteconfig.Site) {
	for _, r := range site.Retired() {
		log.Warn().Msg(r)
	}
}
