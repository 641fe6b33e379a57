//go:build linux

package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// testSFPostgresAcrossKillAndDatabaseRestart is TestSFPostgresExactlyOnceAcrossKillAndDatabaseRestart
// against pg; with tls it also checks that scadad's connections use TLS.
func testSFPostgresAcrossKillAndDatabaseRestart(t *testing.T, pg *testcluster.Postgres, tls bool) {
	c, active, targets := sfTargetCluster(t, "sf-pg", fmt.Sprintf(
		"{name: db, kind: postgres, postgres: {dsn: %q, password_file: %q, table: history}, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms, max_payload_bytes: 65536, max_in_flight: 1, batch_max_messages: 500}",
		pg.DSN, pg.PasswordFile))
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
	last := map[string]string{}
	var order []string
	for res.Next() {
		var id string
		if err := res.Scan(&id); err != nil {
			t.Fatal(err)
		}
		order = append(order, id)
		producer := id[:strings.LastIndex(id, "-")]
		if prev, ok := last[producer]; ok && prev > id {
			t.Fatalf("%s arrived after %s (FIFO broken)", id, prev)
		}
		last[producer] = id
	}
	if res.Err() != nil {
		t.Fatal(res.Err())
	}
	sort.Strings(order)
	for w := 0; w < producers; w++ {
		for i := 0; i < per; i++ {
			if want := fmt.Sprintf("pg-%02d-%05d", w, i); order[w*per+i] != want {
				t.Fatalf("row %d is %s, want %s", w*per+i, order[w*per+i], want)
			}
		}
	}
}
