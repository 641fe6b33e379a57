//go:build unix

package main

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/siteconfig"
)

type deployResult struct {
	ArtifactBytes  int     `json:"artifact_bytes"`
	Tags           int     `json:"tags"`
	PushToAllMs    float64 `json:"push_to_all_applied_ms"`
	OneTagToAllMs  float64 `json:"one_tag_change_to_all_applied_ms"`
	OneTagPushMs   float64 `json:"one_tag_change_push_ms"`
	ChangedEntries int     `json:"one_tag_change_diff_entries"`
}

// deployPhase pushes a generated 50 x 250-tag site config (about 5 MB) and
// times until every node has applied it, then changes one tag and times
// that too.
func (b *bench) deployPhase() (*deployResult, error) {
	site := siteconfig.Generate(50, 250)
	// The OPC UA server here speaks SecurityPolicy None only (see the
	// docs/opcua.md's gopcua notes), so the generated site must not ask for more.
	site.OPCUA.Security = []siteconfig.SecurityPair{{Policy: "None", Mode: "None"}}
	site.Targets = append(site.Targets, siteconfig.Target{Name: "bench", URL: b.sink.URL, BackoffFloor: 30 * time.Second, BackoffMax: 30 * time.Second})
	first, err := siteconfig.Canonical(site)
	if err != nil {
		return nil, err
	}
	changed := site.Clone()
	changed.Instances[7].Attributes[42].Tag += ".Alt"
	second, err := siteconfig.Canonical(changed)
	if err != nil {
		return nil, err
	}
	res := &deployResult{ArtifactBytes: len(first), Tags: 50 * 250}
	old, err := siteconfig.Parse(first)
	if err != nil {
		return nil, err
	}
	neu, err := siteconfig.Parse(second)
	if err != nil {
		return nil, err
	}
	diff := siteconfig.Diff(old, neu)
	for _, ic := range diff.Instances {
		res.ChangedEntries += len(ic.Attributes)
	}
	lead, err := b.leader()
	if err != nil {
		return nil, err
	}
	cli, err := b.client(lead)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	push := func(artifact []byte) (float64, float64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		t0 := time.Now()
		resp, err := cli.api.DeployPush(ctx, &controlpb.DeployPushRequest{Artifact: artifact, Message: "scadabench"}, grpc.MaxCallSendMsgSize(64<<20))
		if err != nil {
			return 0, 0, err
		}
		pushed := time.Since(t0)
		err = testwait.Poll(ctx, func() bool {
			st, err := cli.api.DeployStatus(ctx, &controlpb.DeployStatusRequest{})
			if err != nil {
				return false
			}
			ok := 0
			for _, n := range st.Nodes {
				if n.Revision == resp.Revision && n.Ok {
					ok++
				}
			}
			return ok == len(b.c.Nodes)
		})
		return float64(time.Since(t0).Microseconds()) / 1000, float64(pushed.Microseconds()) / 1000, err
	}
	if res.PushToAllMs, _, err = push(first); err != nil {
		return nil, err
	}
	if res.OneTagToAllMs, res.OneTagPushMs, err = push(second); err != nil {
		return nil, err
	}
	return res, nil
}
