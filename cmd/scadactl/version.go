package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/version"
)

// nodeVersion is one node's answer to `scadactl version`.
type nodeVersion struct {
	Node         string `json:"node"`
	APIAddr      string `json:"api_addr,omitempty"`
	Version      string `json:"version,omitempty"`
	Revision     string `json:"revision,omitempty"`
	GoVersion    string `json:"go_version,omitempty"`
	FeatureLevel uint32 `json:"fsm_feature_level,omitempty"`
	Role         string `json:"role,omitempty"`
	ApplyBlocked string `json:"apply_blocked,omitempty"`
	Error        string `json:"error,omitempty"`
}

type versionReport struct {
	Client              version.Info  `json:"client"`
	Nodes               []nodeVersion `json:"nodes"`
	ClusterFeatureLevel uint32        `json:"cluster_fsm_feature_level"`
	LowestMember        string        `json:"lowest_member,omitempty"`
}

// runVersion prints scadactl's build and every member's: it asks the
// answering node for the members, then each member's control API.
func runVersion(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	pos, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("version takes no arguments")
	}
	rep := versionReport{Client: version.Get(), Nodes: []nodeVersion{}}
	c, done, err := g.connect(ctx)
	if err != nil {
		// scadactl's own version needs no cluster: say it, then why the
		// nodes' are missing.
		if perr := g.printOut(rep, func(w *tabwriter.Writer) { fmt.Fprintf(w, "client\t%s\n", rep.Client) }); perr != nil {
			return perr
		}
		return err
	}
	st, err := c.Status(ctx, &controlpb.StatusRequest{})
	done()
	if err != nil {
		return rpcErr("status", err)
	}
	rep.ClusterFeatureLevel, rep.LowestMember = st.ClusterFeatureLevel, st.FeatureLevelLowest
	for _, m := range st.Members {
		nv := nodeVersion{Node: m.Id, APIAddr: m.ApiAddr}
		if m.Id == st.NodeId {
			nv = fromStatus(nv, st)
		} else if m.ApiAddr == "" {
			nv.Error = "no control API address configured"
		} else if ns, err := g.leaderStatus(ctx, m.ApiAddr); err != nil {
			nv.Error = rpcErr("status", err).Error()
		} else {
			nv = fromStatus(nv, ns)
		}
		rep.Nodes = append(rep.Nodes, nv)
	}
	return g.printOut(rep, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "client\t%s\n\n", rep.Client)
		fmt.Fprintf(w, "NODE\tROLE\tVERSION\tREVISION\tFSM LEVEL\tGO\n")
		for _, n := range rep.Nodes {
			if n.Error != "" {
				fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\t(%s)\n", n.Node, n.Error)
				continue
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Role, n.Version, orDash(n.Revision), levelText(n.FeatureLevel), n.GoVersion)
			if n.ApplyBlocked != "" {
				fmt.Fprintf(w, "\tAPPLY BLOCKED: %s\n", n.ApplyBlocked)
			}
		}
		if rep.ClusterFeatureLevel != 0 {
			fmt.Fprintf(w, "\ncluster FSM feature level\t%d (the lowest member: %s)\n", rep.ClusterFeatureLevel, rep.LowestMember)
		} else {
			fmt.Fprintf(w, "\ncluster FSM feature level\tunknown (node %s predates feature levels)\n", st.NodeId)
		}
	})
}

func fromStatus(nv nodeVersion, st *controlpb.StatusResponse) nodeVersion {
	nv.Version, nv.Revision, nv.GoVersion = st.Version, st.Revision, st.GoVersion
	nv.FeatureLevel, nv.Role, nv.ApplyBlocked = st.FeatureLevel, st.Role, st.ApplyBlocked
	return nv
}

// levelText shows a feature level; 0 is a node from before levels existed.
func levelText(l uint32) string {
	if l == 0 {
		return "1 (before v0.2.0)"
	}
	return fmt.Sprint(l)
}
