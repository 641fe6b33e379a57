//go:build linux

package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// produce enqueues prefix-w-i for i < perProducer from each of producers
// producers, each message retried (same id, on any running node) until
// acknowledged, one after the other per producer. progress counts the
// acknowledged.
func produce(c *testcluster.Cluster, target, prefix string, producers, perProducer int, progress *atomic.Int64) func() {
	var wg sync.WaitGroup
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				id := fmt.Sprintf("%s-%02d-%05d", prefix, w, i)
				for try := 0; ; try++ {
					n := c.Nodes[(w+try)%len(c.Nodes)]
					if n.Running() && enqueue(n, target, id, []byte(fmt.Sprintf(`{"producer":%d,"i":%d}`, w, i))) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				progress.Add(1)
			}
		}()
	}
	return wg.Wait
}

// killAndRestartMidStream is the faults of a 10,000-message run: a
// SIGKILL of the Active once acked reports 3,000 acknowledged, then at
// 6,000 the receiver (a broker, a database) stopped for a second,
// deliveries failing meanwhile, and started again.
func killAndRestartMidStream(t *testing.T, c *testcluster.Cluster, active *testcluster.Node, receiver interface {
	Stop()
	Start() error
}, acked func() int64) {
	t.Helper()
	testwait.For(t, 60*time.Second, "3,000 acknowledged", func() bool { return acked() >= 3000 })
	c.Kill(active)
	t.Logf("SIGKILL of the Active %s at %d acknowledged", active.ID, acked())
	testwait.For(t, 60*time.Second, "6,000 acknowledged", func() bool { return acked() >= 6000 })
	receiver.Stop()
	t.Logf("receiver stopped at %d acknowledged", acked())
	time.Sleep(time.Second) // deliveries fail meanwhile: retried
	if err := receiver.Start(); err != nil {
		t.Fatal(err)
	}
}

// sfTargetCluster starts a 2+witness cluster, deploys a site whose only
// target is the YAML flow mapping target, and returns the cluster, its
// Active node and what sf targets says.
func sfTargetCluster(t *testing.T, name, target string) (*testcluster.Cluster, *testcluster.Node, []*controlpb.SFTargetStats) {
	t.Helper()
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	waitOneActive(t, c, 20*time.Second)
	deploySite(t, c, []byte(string(testcluster.SiteConfig(name, nil, 0))+"  - "+target+"\n"))
	active := waitOneActive(t, c, 10*time.Second)
	var targets []*controlpb.SFTargetStats
	ctlJSON(t, c, nil, &targets, "sf", "targets")
	return c, active, targets
}

// 10,000 messages to a PostgreSQL target across a SIGKILL of the Active
// and a restart of the database mid-stream, once without TLS and once to
// a server that lets only TLS in (pg_hba hostssl; the DSN verifies the
// server's certificate against the CA made for it): every acknowledged
// message is a row, exactly once (count(*) is 10,000; the id is the
// primary key), and each producer's messages arrived in the order they
// were acknowledged.
func TestSFPostgresExactlyOnceAcrossKillAndDatabaseRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			pg, err := testcluster.StartPostgresWith(t.TempDir(), testcluster.PostgresOptions{TLS: tc.tls})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pg.Stop)
			testSFPostgresAcrossKillAndDatabaseRestart(t, pg, tc.tls)
		})
	}
}

// historyTarget is the site's target db: the table history of the
// database at dsn, 500 rows an INSERT, strict order.
func historyTarget(dsn, passwordFile string) string {
	return fmt.Sprintf("{name: db, kind: postgres, postgres: {dsn: %q, password_file: %q, table: history}, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms, max_payload_bytes: 65536, max_in_flight: 1, batch_max_messages: 500}", dsn, passwordFile)
}

// testSFPostgresAcrossKillAndDatabaseRestart is TestSFPostgresExactlyOnceAcrossKillAndDatabaseRestart
// against pg; with tls it also checks that scadad's connections use TLS.
func testSFPostgresAcrossKillAndDatabaseRestart(t *testing.T, pg *testcluster.Postgres, tls bool) {
	c, active, targets := sfTargetCluster(t, "sf-pg", historyTarget(pg.DSN, pg.PasswordFile))
	if len(targets) != 1 || targets[0].Kind != "postgres" || targets[0].Endpoint != fmt.Sprintf("127.0.0.1:%d/postgres table history", pg.Port) || targets[0].BatchMaxMessages != 500 {
		t.Fatalf("sf targets: %+v", targets)
	}

	const producers, per = 10, 1000
	var acked atomic.Int64
	wait := produce(c, "db", "pg", producers, per, &acked)
	killAndRestartMidStream(t, c, active, pg, acked.Load)
	wait()

	conn, err := pg.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var rows int
	testwait.ForDetail(t, 120*time.Second, "10,000 rows", func() (bool, string) {
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM history").Scan(&rows); err != nil {
			return false, err.Error()
		}
		return rows >= producers*per, fmt.Sprintf("%d rows", rows)
	})
	// The survivor's connections (the server allows only TLS when tls, so
	// the rows could not have come otherwise; this names what it saw).
	var scadad, encrypted int
	if err := conn.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE s.ssl)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name LIKE 'scadad %'`).Scan(&scadad, &encrypted); err != nil {
		t.Fatal(err)
	}
	if scadad == 0 || tls && encrypted != scadad || !tls && encrypted != 0 {
		t.Fatalf("%d of scadad's %d connections use TLS, want all with TLS on, none without", encrypted, scadad)
	}
	// Nothing more arrives: no duplicate is on its way either.
	time.Sleep(time.Second)
	var distinct int
	if err := conn.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT id) FROM history").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != producers*per || distinct != rows {
		t.Fatalf("%d rows, %d distinct ids; want exactly %d", rows, distinct, producers*per)
	}
	res, err := conn.Query(context.Background(), "SELECT id FROM history ORDER BY arrival")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	checkEachProducerInOrder(t, ids, "pg", producers, per)
}

// checkEachProducerInOrder checks that ids, in the order they arrived,
// are prefix-w-i for each of producers producers and i < per, each once,
// and each producer's in the order they were acknowledged.
func checkEachProducerInOrder(t *testing.T, ids []string, prefix string, producers, per int) {
	t.Helper()
	last := map[string]string{}
	for _, id := range ids {
		producer := id[:strings.LastIndex(id, "-")]
		if prev, ok := last[producer]; ok && prev > id {
			t.Fatalf("%s arrived after %s (FIFO broken)", id, prev)
		}
		last[producer] = id
	}
	order := slices.Sorted(slices.Values(ids))
	if len(order) != producers*per {
		t.Fatalf("%d ids, want %d", len(order), producers*per)
	}
	for w := 0; w < producers; w++ {
		for i := 0; i < per; i++ {
			if want := fmt.Sprintf("%s-%02d-%05d", prefix, w, i); order[w*per+i] != want {
				t.Fatalf("row %d is %s, want %s", w*per+i, order[w*per+i], want)
			}
		}
	}
}

// 10,000 messages to a TimescaleDB hypertable (on enqueued_at, chunks of
// a minute, PRIMARY KEY (id, enqueued_at) as TimescaleDB requires) across
// a SIGKILL of the Active and a restart of the database mid-stream: every
// acknowledged message is a row exactly once, each producer's in the
// order they were acknowledged.
func TestSFTimescaleExactlyOnceAcrossKillAndDatabaseRestart(t *testing.T) {
	ts, err := testcluster.StartTimescale(t.TempDir())
	if errors.Is(err, testcluster.ErrNoNode) {
		t.Skip("SKIPPED: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ts.Stop()
		if t.Failed() {
			t.Logf("---- TimescaleDB server log ----\n%s", ts.Log())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := ts.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE history (arrival bigint GENERATED ALWAYS AS IDENTITY, id text NOT NULL, enqueued_at timestamptz NOT NULL,
		  delivered_at timestamptz NOT NULL DEFAULT now(), content_type text, payload bytea NOT NULL, payload_json jsonb,
		  PRIMARY KEY (id, enqueued_at))`,
		`SELECT create_hypertable('history', by_range('enqueued_at', interval '1 minute'))`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close(ctx) // the server serves one connection at a time: the target's from here
	c, active, targets := sfTargetCluster(t, "sf-ts", historyTarget(ts.DSN, ts.PasswordFile))
	if len(targets) != 1 || targets[0].Kind != "postgres" {
		t.Fatalf("sf targets: %+v", targets)
	}

	const producers, per = 10, 1000
	var acked atomic.Int64
	wait := produce(c, "db", "ts", producers, per, &acked)
	killAndRestartMidStream(t, c, active, ts, acked.Load)
	wait()

	// The server serves one connection at a time, the target's: the
	// Active says when it has delivered everything, and its nodes stop, so
	// the test's connection comes in and nothing more can arrive.
	testwait.ForDetail(t, 120*time.Second, "the Active to have delivered everything", func() (bool, string) {
		var stats []*controlpb.SFTargetStats
		if err := c.CtlJSON(ctx, nil, &stats, "sf", "stats"); err != nil {
			return false, err.Error()
		}
		return len(stats) == 1 && stats[0].Pending == 0 && stats[0].Parked == 0, fmt.Sprintf("%+v", stats)
	})
	for _, n := range c.Nodes {
		c.Stop(n)
	}
	conn, err = ts.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	res, err := conn.Query(ctx, "SELECT id FROM history ORDER BY arrival")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	checkEachProducerInOrder(t, ids, "ts", producers, per)
	var chunks int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM timescaledb_information.chunks WHERE hypertable_name = 'history'").Scan(&chunks); err != nil {
		t.Fatal(err)
	}
	if chunks == 0 {
		t.Fatal("the rows are in no chunk of the hypertable")
	}
	t.Logf("10,000 rows exactly once in %d chunks of the hypertable", chunks)
}
