package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/internal/atomicfile"
	"github.com/scadad/scadad/internal/tty"
)

const snapshotChunkSize = 256 << 10

func runSnapshot(ctx context.Context, g *globals, args []string) error {
	// save alone takes --local; named first, the subcommand registers only
	// its own flags (a flag first still finds every subcommand's).
	name, local := "snapshot", new(bool)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name += " " + args[0]
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if name == "snapshot" || name == "snapshot save" {
		fs.BoolVar(local, "local", false, "the answering node's own state, even when it is not the leader (which may lack the last acknowledged writes)")
	}
	args, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 2 {
		return usagef("snapshot save FILE [--local] | restore FILE | inspect FILE")
	}
	sub, file := args[0], args[1]
	if *local && sub != "save" {
		return usagef("snapshot %s: --local is for save only", sub)
	}
	switch sub {
	case "save":
		return snapshotSave(ctx, g, file, *local)
	case "restore":
		return snapshotRestore(ctx, g, file)
	case "inspect":
		return snapshotInspect(g, file)
	default:
		return usagef("snapshot: unknown subcommand %q (save, restore, inspect)", sub)
	}
}

// progress prints a running byte count to stderr at most every 200 ms
// when stderr is a terminal, and only the final count otherwise: a line
// rewritten with carriage returns is noise in a log file or a pipe.
type progress struct {
	w     io.Writer
	live  bool // w is a terminal
	verb  string
	total int64
	done  int64
	last  time.Time
}

func newProgress(w io.Writer, verb string, total int64) *progress {
	return &progress{w: w, live: tty.Is(w), verb: verb, total: total}
}

func (p *progress) add(n int) {
	p.done += int64(n)
	if !p.live || time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.print("\r")
}

func (p *progress) print(prefix string) {
	if p.total > 0 {
		fmt.Fprintf(p.w, "%s%s %s / %s (%.0f%%)", prefix, p.verb, human(p.done), human(p.total), 100*float64(p.done)/float64(p.total))
	} else {
		fmt.Fprintf(p.w, "%s%s %s", prefix, p.verb, human(p.done))
	}
}

func (p *progress) finish() {
	prefix := ""
	if p.live {
		prefix = "\r"
	}
	p.print(prefix)
	fmt.Fprintln(p.w)
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func snapshotSave(ctx context.Context, g *globals, file string, local bool) error {
	if _, err := os.Stat(file); err == nil {
		// An older backup is worth a question before it is replaced.
		if err := g.confirm(fmt.Sprintf("%s exists. Replace it with a new backup?", file)); err != nil {
			return err
		}
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	// Write beside the target and rename, so a failed save never leaves a
	// truncated file under the name the operator asked for.
	tmp, err := atomicfile.Create(file, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	defer tmp.Close()
	stream, err := c.SnapshotSave(ctx, &controlpb.SnapshotSaveRequest{Local: local})
	if err != nil {
		return rpcErr("snapshot save", err)
	}
	p := newProgress(g.stderr, "saved", 0)
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rpcErr("snapshot save", err)
		}
		if chunk.TotalSize > 0 {
			p.total = chunk.TotalSize
		}
		if _, err := tmp.Write(chunk.Data); err != nil {
			return fmt.Errorf("snapshot save: write %s: %w", tmp.Name(), err)
		}
		p.add(len(chunk.Data))
	}
	p.finish()
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	info, err := fsm.InspectSnapshot(tmp)
	if err != nil {
		return fmt.Errorf("snapshot save: the received snapshot does not verify: %w", err)
	}
	if err := tmp.Commit(); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	return g.printOut(info, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "saved %s (%s, applied index %d, verified)\n", file, human(p.done), info.Meta.AppliedIndex)
	})
}

func snapshotRestore(ctx context.Context, g *globals, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	defer f.Close()
	// Verify locally first: a corrupt file never reaches the cluster.
	info, err := fsm.InspectSnapshot(f)
	if err != nil {
		return fmt.Errorf("snapshot restore: %s does not verify: %w", file, err)
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	if err := g.confirm(fmt.Sprintf("Replace the whole cluster state with %s (applied index %d)?", file, info.Meta.AppliedIndex)); err != nil {
		return err
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	stream, err := c.SnapshotRestore(ctx)
	if err != nil {
		return rpcErr("snapshot restore", err)
	}
	p := newProgress(g.stderr, "sent", st.Size())
	buf := make([]byte, snapshotChunkSize)
	first := true
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			chunk := &controlpb.SnapshotChunk{Data: buf[:n]}
			if first {
				chunk.TotalSize = st.Size()
				first = false
			}
			if err := stream.Send(chunk); err != nil {
				_, err = stream.CloseAndRecv()
				return rpcErr("snapshot restore", err)
			}
			p.add(n)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("snapshot restore: read %s: %w", file, rerr)
		}
	}
	p.finish()
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return rpcErr("snapshot restore", err)
	}
	return g.printOut(resp, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "restored %s; cluster applied index now %d\n", file, resp.AppliedIndex)
	})
}

func snapshotInspect(g *globals, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("snapshot inspect: %w", err)
	}
	defer f.Close()
	info, err := fsm.InspectSnapshot(f)
	if err != nil {
		return fmt.Errorf("snapshot inspect: %s: %w", file, err)
	}
	return g.printOut(info, func(w *tabwriter.Writer) {
		m := info.Meta
		fmt.Fprintf(w, "file\t%s (verified: framing and body sha256 %.16s…)\n", file, info.BodySHA256)
		fmt.Fprintf(w, "format\t%d, state schema %d\n", info.FormatVersion, m.SchemaVersion)
		fmt.Fprintf(w, "size\t%s of state, %s compressed\n", human(info.StateBytes), human(int64(info.BodyBytes)))
		fmt.Fprintf(w, "applied index\t%d (term %d)\n", m.AppliedIndex, m.AppliedTerm)
		fmt.Fprintf(w, "cluster epoch\t%d\n", m.ClusterEpoch)
		fmt.Fprintf(w, "state digest\t%s\n", info.Digest)
		fmt.Fprintf(w, "artifacts\t%d (%d committed)\n", info.Artifacts, info.CommittedArtifacts)
		fmt.Fprintf(w, "deploy targets\t%d\n", info.DeployTargets)
		fmt.Fprintf(w, "s&f targets\t%d\n", info.SFTargets)
		fmt.Fprintf(w, "pending messages\t%d\n", info.Pending)
		fmt.Fprintf(w, "parked messages\t%d\n", info.Parked)
		fmt.Fprintf(w, "delivered ids kept\t%d (an id enqueued again is a duplicate)\n", info.DeliveredTombstones)
		fmt.Fprintf(w, "audit entries\t%d\n", info.AuditEntries)
	})
}
