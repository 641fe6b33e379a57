//go:build linux

package pgtarget_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/storeforward/pgtarget"
)

func startPG(t *testing.T) *testcluster.Postgres {
	t.Helper()
	pg, err := testcluster.StartPostgres(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	return pg
}

func target(pg *testcluster.Postgres, table string) storeforward.Target {
	return storeforward.Target{Name: "db", Kind: pgtarget.Name, Timeout: 10 * time.Second, MaxInFlight: 1,
		Settings: pgtarget.Settings{DSN: pg.DSN, PasswordFile: pg.PasswordFile, Table: table}}
}

func msgs(prefix string, n int, payload func(i int) string) []*storeforward.Message {
	var out []*storeforward.Message
	for i := 0; i < n; i++ {
		out = append(out, &storeforward.Message{ID: fmt.Sprintf("%s-%d", prefix, i), EnqueuedAt: time.Unix(1700000000, int64(i)),
			Payload: []byte(payload(i)), Headers: []storeforward.Header{{Key: "Content-Type", Value: "application/json"}}})
	}
	return out
}

func count(t *testing.T, pg *testcluster.Postgres, query string) int {
	t.Helper()
	conn, err := pg.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestBatchesAreInsertedOnceWithThePasswordFile(t *testing.T) {
	pg := startPG(t)
	tg := target(pg, "history")
	if err := (pgtarget.Kind{}).Validate(tg); err != nil {
		t.Fatal(err)
	}
	s, err := pgtarget.Kind{}.NewSender(tg, storeforward.SenderEnv{NodeID: "n1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	batch := msgs("m", 500, func(i int) string { return fmt.Sprintf(`{"v":%d}`, i) })
	batch[7].Payload = []byte("not json")
	if err := s.Send(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// Delivered again (a failover), overlapping: stored once.
	if err := s.Send(ctx, append(batch[400:], msgs("n", 10, func(i int) string { return "{}" })...)); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pg, "SELECT count(*) FROM history"); n != 510 {
		t.Fatalf("%d rows, want 510", n)
	}
	if n := count(t, pg, "SELECT count(*) FROM history WHERE payload_json IS NULL"); n != 1 {
		t.Fatalf("%d rows without payload_json, want the one non-JSON payload", n)
	}
	if n := count(t, pg, "SELECT (payload_json->>'v')::int FROM history WHERE id = 'm-42'"); n != 42 {
		t.Fatalf("payload_json of m-42: %d", n)
	}
}

func TestConstraintViolationIsPermanentAndDownServerTransient(t *testing.T) {
	pg := startPG(t)
	conn, err := pg.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The DBA's table, with a rule of its own.
	if _, err := conn.Exec(context.Background(), fmt.Sprintf(pgtarget.DDL, "strict")+`; ALTER TABLE strict ADD CHECK (octet_length(payload) < 10)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	tg := target(pg, "strict")
	tg.ParkOn = nil
	s, err := pgtarget.Kind{}.NewSender(tg, storeforward.SenderEnv{NodeID: "n1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Send(context.Background(), msgs("big", 1, func(int) string { return strings.Repeat("x", 20) }))
	var r storeforward.Refusal
	if err == nil || !asRefusal(err, &r) || !r.Verdict().Permanent || r.Verdict().Code != "23514" {
		t.Fatalf("check violation: %v; want a permanent refusal 23514", err)
	}
	pg.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = s.Send(ctx, msgs("ok", 1, func(int) string { return "1" }))
	if err == nil || (asRefusal(err, &r) && r.Verdict().Permanent) {
		t.Fatalf("server down: %v; want a transient failure", err)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), msgs("ok", 1, func(int) string { return "1" })); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}

func asRefusal(err error, r *storeforward.Refusal) bool {
	for e := err; e != nil; {
		if x, ok := e.(storeforward.Refusal); ok {
			*r = x
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

func TestValidateRefusesBadSettings(t *testing.T) {
	for _, s := range []pgtarget.Settings{
		{DSN: "postgres://h/db", Table: "Bad-Name"},
		{DSN: "postgres://h/db", Table: ""},
		{DSN: "::::", Table: "t"},
	} {
		tg := storeforward.Target{Name: "db", Kind: pgtarget.Name, Settings: s}
		if err := (pgtarget.Kind{}).Validate(tg); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if err := (pgtarget.Kind{}).Validate(storeforward.Target{Name: "db", Kind: pgtarget.Name, Settings: pgtarget.Settings{DSN: "host=h dbname=d", Table: "plant.history"}}); err != nil {
		t.Errorf("schema-qualified table refused: %v", err)
	}
}

// A server that takes TLS connections only, with a certificate of a CA
// the DSN names (sslmode=verify-full&sslrootcert=…): rows are inserted
// over TLS; the same target with sslmode=disable is refused by the server
// (transient: the operator fixes the DSN, nothing is lost).
func TestTLSToTheServer(t *testing.T) {
	pg, err := testcluster.StartPostgresWith(t.TempDir(), testcluster.PostgresOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	tg := target(pg, "history")
	if err := (pgtarget.Kind{}).Validate(tg); err != nil {
		t.Fatal(err)
	}
	s, err := pgtarget.Kind{}.NewSender(tg, storeforward.SenderEnv{NodeID: "n1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(context.Background(), msgs("tls", 3, func(i int) string { return "{}" })); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pg, "SELECT count(*) FROM history WHERE id LIKE 'tls-%'"); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	if n := count(t, pg, "SELECT count(*) FROM pg_stat_ssl WHERE ssl"); n < 1 {
		t.Fatal("no connection uses TLS")
	}

	plain := target(pg, "history")
	plain.Settings = pgtarget.Settings{DSN: strings.Split(pg.DSN, "?")[0] + "?sslmode=disable", PasswordFile: pg.PasswordFile, Table: "history"}
	ps, err := pgtarget.Kind{}.NewSender(plain, storeforward.SenderEnv{NodeID: "n1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = ps.Send(ctx, msgs("plain", 1, func(int) string { return "{}" }))
	if err == nil || !strings.Contains(err.Error(), "no encryption") && !strings.Contains(err.Error(), "pg_hba") {
		t.Fatalf("without TLS: %v, want the server's refusal", err)
	}
	var r storeforward.Refusal
	if errors.As(err, &r) && r.Verdict().Permanent {
		t.Fatalf("without TLS: %v is permanent, want transient", err)
	}
}

// A TimescaleDB hypertable, like PostgreSQL's own partitioned table, takes
// a unique key only with its partitioning column in it: the DBA's table
// for a time-partitioned history has PRIMARY KEY (id, enqueued_at). The
// enqueue stamp is the replicated one, the same on every delivery of a
// message, so a delivery again around a failover still conflicts and is
// stored once. Partitioned by PostgreSQL here; TimescaleDB itself below.
func TestTimePartitionedTableWithIdAndStampAsKey(t *testing.T) {
	pg := startPG(t)
	conn, err := pg.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE series (arrival bigint GENERATED ALWAYS AS IDENTITY, id text NOT NULL, enqueued_at timestamptz NOT NULL,
		  delivered_at timestamptz NOT NULL DEFAULT now(), content_type text, payload bytea NOT NULL, payload_json jsonb,
		  PRIMARY KEY (id, enqueued_at)) PARTITION BY RANGE (enqueued_at)`,
		`CREATE TABLE series_2023 PARTITION OF series FOR VALUES FROM ('2023-01-01') TO ('2024-01-01')`,
		`CREATE TABLE odd (id text, enqueued_at timestamptz NOT NULL, content_type text, payload bytea NOT NULL, payload_json jsonb, arrival bigint)`,
	} {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close(context.Background())

	s, err := pgtarget.Kind{}.NewSender(target(pg, "series"), storeforward.SenderEnv{NodeID: "n1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	batch := msgs("m", 100, func(i int) string { return "{}" })
	if err := s.Send(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), append(batch[50:], msgs("n", 5, func(int) string { return "{}" })...)); err != nil {
		t.Fatalf("delivered again: %v", err)
	}
	if n := count(t, pg, "SELECT count(*) FROM series"); n != 105 {
		t.Fatalf("%d rows, want 105", n)
	}

	// A table without a key on the id cannot store a message once: the
	// target says so, naming the table and the key it needs, and retries
	// (the DBA fixes the table; nothing is parked or lost).
	s2, err := pgtarget.Kind{}.NewSender(target(pg, "odd"), storeforward.SenderEnv{NodeID: "n1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	err = s2.Send(context.Background(), msgs("o", 1, func(int) string { return "{}" }))
	var r storeforward.Refusal
	if err == nil || !strings.Contains(err.Error(), `"odd"`) || !strings.Contains(err.Error(), "PRIMARY KEY (id)") || (asRefusal(err, &r) && r.Verdict().Permanent) {
		t.Fatalf("table without a key on id: %v; want a transient error naming the table and the key", err)
	}
	if n := count(t, pg, "SELECT count(*) FROM odd"); n != 0 {
		t.Fatalf("%d rows in a table that cannot deduplicate", n)
	}
}

// The same against TimescaleDB itself: a hypertable on enqueued_at with
// PRIMARY KEY (id, enqueued_at), chunks of a day, messages stamped over
// ten days. Every message is a row once, delivered again or not, in the
// chunks of its days.
func TestTimescaleHypertableWithIdAndStampAsKey(t *testing.T) {
	ts, err := testcluster.StartTimescale(t.TempDir())
	if errors.Is(err, testcluster.ErrNoNode) {
		t.Skip("SKIPPED: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	timescaleExec(t, ts, `CREATE TABLE series (arrival bigint GENERATED ALWAYS AS IDENTITY, id text NOT NULL, enqueued_at timestamptz NOT NULL,
		  delivered_at timestamptz NOT NULL DEFAULT now(), content_type text, payload bytea NOT NULL, payload_json jsonb,
		  PRIMARY KEY (id, enqueued_at))`,
		`SELECT create_hypertable('series', 'enqueued_at', chunk_time_interval => interval '1 day')`)
	s, err := pgtarget.Kind{}.NewSender(storeforward.Target{Name: "db", Kind: pgtarget.Name, Timeout: 10 * time.Second, MaxInFlight: 1,
		Settings: pgtarget.Settings{DSN: ts.DSN, PasswordFile: ts.PasswordFile, Table: "series"}}, storeforward.SenderEnv{NodeID: "n1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	batch := msgs("m", 100, func(i int) string { return fmt.Sprintf(`{"i":%d}`, i) })
	for i, m := range batch {
		m.EnqueuedAt = start.Add(time.Duration(i) * 10 * 24 * time.Hour / 100)
	}
	if err := s.Send(ctx, batch); err != nil {
		t.Fatal(err)
	}
	again := append(batch[50:], msgs("n", 5, func(int) string { return "{}" })...)
	if err := s.Send(ctx, again); err != nil {
		t.Fatalf("delivered again: %v", err)
	}
	s.Close() // the server's one connection, for the test's below
	conn, err := ts.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for q, want := range map[string]int{
		"SELECT count(*) FROM series":                                                          105,
		"SELECT count(DISTINCT id) FROM series":                                                105,
		"SELECT count(*) FROM series WHERE id LIKE 'm-%'":                                      100,
		"SELECT count(*) FROM timescaledb_information.chunks WHERE hypertable_name = 'series'": 11, // ten days of m, and the day of n
	} {
		var n int
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n != want {
			t.Errorf("%s: %d, want %d", q, n, want)
		}
	}
}

// timescaleExec runs statements on a connection of the test's own, closed after.
func timescaleExec(t *testing.T, ts *testcluster.Timescale, statements ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := ts.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range statements {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
