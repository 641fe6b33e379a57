package pgtarget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/scadad/scadad/storeforward"
)

// Name is the kind's name in Target.Kind and the site config.
const Name = "postgres"

// Settings are a PostgreSQL target's own settings (Target.Settings).
type Settings struct {
	// DSN is a libpq connection string or URL without the password
	// (postgres://scadad@db.local:5432/plant?sslmode=verify-full).
	DSN string
	// PasswordFile holds the password (one line), read on every new
	// connection; empty: none, or what the DSN or PGPASSFILE give.
	PasswordFile string
	// Table is the target's table, optionally schema-qualified.
	Table string
}

// Kind implements storeforward.Kind.
type Kind struct{}

var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}$`)

func settingsOf(t storeforward.Target) (Settings, error) {
	s, ok := t.Settings.(Settings)
	if !ok {
		return Settings{}, fmt.Errorf("target %s: postgres settings missing (got %T)", t.Name, t.Settings)
	}
	return s, nil
}

// Validate implements storeforward.Kind.
func (Kind) Validate(t storeforward.Target) error {
	s, err := settingsOf(t)
	if err != nil {
		return err
	}
	if _, err := pgxpool.ParseConfig(s.DSN); err != nil {
		return fmt.Errorf("target %s: dsn: %w", t.Name, err)
	}
	if !tableName.MatchString(s.Table) {
		return fmt.Errorf("target %s: table %q: want [schema.]name of lower-case letters, digits and _ (at most 63 each)", t.Name, s.Table)
	}
	return nil
}

// NewSender implements storeforward.Kind. It connects on the first Send.
func (Kind) NewSender(t storeforward.Target, env storeforward.SenderEnv) (storeforward.Sender, error) {
	s, err := settingsOf(t)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(s.DSN)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	cfg.MaxConns = int32(max(1, t.MaxInFlight))
	cfg.MinConns = 0
	cfg.ConnConfig.ConnectTimeout = min(t.Timeout, 10*time.Second)
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "scadad " + env.NodeID
	if s.PasswordFile != "" {
		file := s.PasswordFile
		cfg.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
			b, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("read password_file: %w", err)
			}
			cc.Password = strings.TrimRight(string(b), "\r\n")
			return nil
		}
	}
	parts := strings.Split(s.Table, ".")
	return &sender{target: t.Name, cfg: cfg, table: pgx.Identifier(parts).Sanitize()}, nil
}

type sender struct {
	target string
	cfg    *pgxpool.Config
	table  string // quoted

	mu     sync.Mutex
	pool   *pgxpool.Pool
	insert string // the insert, once the table and its key are known
}

// DDL is the table of a target, as created when it is missing; %s is the
// quoted table name. arrival numbers rows in the order they were stored
// (the buffer's FIFO order with max_in_flight 1); payload_json holds a
// payload that is valid JSON, for queries; payload holds every payload as
// it was enqueued.
const DDL = `CREATE TABLE IF NOT EXISTS %s (
  arrival      bigint GENERATED ALWAYS AS IDENTITY,
  id           text PRIMARY KEY,
  enqueued_at  timestamptz NOT NULL,
  delivered_at timestamptz NOT NULL DEFAULT now(),
  content_type text,
  payload      bytea NOT NULL,
  payload_json jsonb
)`

// insertSQL takes the quoted table and the key its conflicts are on.
const insertSQL = `INSERT INTO %s (id, enqueued_at, content_type, payload, payload_json)
SELECT id, enqueued_at, content_type, payload, payload_json::jsonb
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::bytea[], $5::text[])
  WITH ORDINALITY AS m(id, enqueued_at, content_type, payload, payload_json, n)
ORDER BY n
ON CONFLICT (%s) DO NOTHING`

// keysSQL lists the columns of each unique, non-partial index of a table,
// its primary key included: the keys an ON CONFLICT can name.
const keysSQL = `SELECT array_agg(a.attname::text ORDER BY a.attname)
FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indpred IS NULL
GROUP BY i.indexrelid`

// conflictKey is the key a message delivered again conflicts on: the id
// alone (the DDL's primary key), or the id with the enqueue stamp, which
// a table partitioned by time must have (a TimescaleDB hypertable, like a
// partitioned PostgreSQL table, takes a unique key only with its
// partitioning column in it). The stamp is the replicated one, the same
// on every delivery of a message, so either key stores a message once.
func (s *sender) conflictKey(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	rows, err := pool.Query(ctx, keysSQL, s.table)
	if err != nil {
		return "", classify(fmt.Errorf("read the keys of %s: %w", s.table, err))
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return "", classify(fmt.Errorf("read the keys of %s: %w", s.table, err))
	}
	withStamp := false
	for _, k := range keys {
		switch strings.Join(k, ",") {
		case "id":
			return "id", nil
		case "enqueued_at,id":
			withStamp = true
		}
	}
	if withStamp {
		return "id, enqueued_at", nil
	}
	return "", fmt.Errorf("table %s has no unique key on (id) or (id, enqueued_at): want PRIMARY KEY (id), or PRIMARY KEY (id, enqueued_at) for a table partitioned by time (a TimescaleDB hypertable), so that a message delivered again is stored once", s.table)
}

// getPool returns the pool and the insert, connecting and reading the
// table's key first when needed.
func (s *sender) getPool(ctx context.Context) (*pgxpool.Pool, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool == nil {
		p, err := pgxpool.NewWithConfig(ctx, s.cfg)
		if err != nil {
			return nil, "", fmt.Errorf("connect: %w", err)
		}
		s.pool = p
	}
	if s.insert == "" {
		if _, err := s.pool.Exec(ctx, fmt.Sprintf(DDL, s.table)); err != nil {
			var pgErr *pgconn.PgError
			// Without the privilege to create it, the table may still
			// exist (made by the DBA from the same DDL): try the insert.
			if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
				return nil, "", classify(fmt.Errorf("create table %s: %w", s.table, err))
			}
		}
		key, err := s.conflictKey(ctx, s.pool)
		if err != nil {
			return nil, "", err
		}
		s.insert = fmt.Sprintf(insertSQL, s.table, key)
	}
	return s.pool, s.insert, nil
}

// Send implements storeforward.Sender: one INSERT of every message of the
// batch, atomic as any statement.
func (s *sender) Send(ctx context.Context, batch []*storeforward.Message) error {
	pool, insert, err := s.getPool(ctx)
	if err != nil {
		return err
	}
	ids := make([]string, len(batch))
	stamps := make([]time.Time, len(batch))
	types := make([]*string, len(batch))
	payloads := make([][]byte, len(batch))
	jsons := make([]*string, len(batch))
	for i, m := range batch {
		ids[i], stamps[i], payloads[i] = m.ID, m.EnqueuedAt, m.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
		for _, h := range m.Headers {
			if strings.EqualFold(h.Key, "Content-Type") {
				v := h.Value
				types[i] = &v
			}
		}
		if len(m.Payload) > 0 && json.Valid(m.Payload) {
			v := string(m.Payload)
			jsons[i] = &v
		}
	}
	if _, err := pool.Exec(ctx, insert, ids, stamps, types, payloads, jsons); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "42") {
			// The table was dropped or its key changed: the next attempt
			// creates it or reads its key again.
			s.mu.Lock()
			s.insert = ""
			s.mu.Unlock()
		}
		return classify(fmt.Errorf("insert %d rows into %s: %w", len(batch), s.table, err))
	}
	return nil
}

// Close implements storeforward.Sender.
func (s *sender) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool != nil {
		s.pool.Close()
		s.pool = nil
	}
}

// Refusal is the database's answer to a failed statement.
type Refusal struct {
	SQLState string
	err      error
}

func (r *Refusal) Error() string { return r.err.Error() }
func (r *Refusal) Unwrap() error { return r.err }

// Verdict implements storeforward.Refusal: data exceptions (class 22) and
// integrity constraint violations (class 23: the id's conflict never
// comes back, ON CONFLICT takes it) are permanent; anything else, such as
// a missing table or privilege (class 42) that an operator fixes, or the
// server shutting down (class 57), is retried.
func (r *Refusal) Verdict() storeforward.Verdict {
	class := r.SQLState[:2]
	return storeforward.Verdict{Code: r.SQLState, Permanent: class == "22" || class == "23"}
}

// classify wraps an error that carries a SQLSTATE in a Refusal.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 {
		return &Refusal{SQLState: pgErr.Code, err: err}
	}
	return err
}
