package bench

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
)

// PrefillOutcome is the prefilled key table of a run with Config.Prefill,
// and the run's figures on the empty one.
type PrefillOutcome struct {
	// Keys is the number of completed keys within retention that the table
	// held before the run, Backlog that of the expired ones
	// (Config.PrefillPurge).
	Keys, Backlog int64
	// Fill is how long filling and vacuuming took.
	Fill time.Duration
	// Size is the key table's size once filled, before the run.
	Size TableSize
	// Empty are the same variants' figures on the empty key table.
	Empty []Result
	// Purging are the same variants' figures on the prefilled table while
	// the purge ran (Config.PrefillPurge); nil without it.
	Purging []Result
	// PurgeRows is how many keys the purge deleted while the prefilled
	// table was measured, in PurgeTime (Config.PrefillPurge): the time it
	// ran until it was stopped or found nothing left, which is less than
	// Purging's time when the backlog ran out. PurgeRows is counted in
	// the table, the expired keys before the first purging pass less
	// those after the last: a batch that a stop cancels may have
	// committed all the same (SQLite's driver then reports the
	// cancellation), so the purge's own counts can fall short.
	PurgeRows int64
	PurgeTime time.Duration
	// PurgeBatch and PurgeShare are the purge's batch size and share of
	// time (Config.PrefillPurge), the defaults filled in.
	PurgeBatch int
	PurgeShare float64
}

// TableSize is a key table's size on disk, in bytes. On SQLite, Table is
// the whole key table (a WITHOUT ROWID table is its primary key's index)
// and Indexes its other index.
type TableSize struct {
	Table, Indexes, Toast int64
}

// prefillClients is how many clients the prefilled keys are spread over.
const prefillClients = 1000

// emptyURLs returns a URL for each of names, on the database at url, with
// no rows (the sides of a run with --prefill; the one of --fresh): on PostgreSQL the schema bench_NAME of the database, dropped and
// made anew; on SQLite at PATH for the first name and PATH-NAME for the
// others, each file removed first. The run's migrations then make the
// tables.
func emptyURLs(ctx context.Context, url string, names ...string) ([]string, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		var out []string
		for i, name := range names {
			p := path
			if i > 0 {
				p += "-" + name
			}
			for _, f := range []string{p, p + "-wal", p + "-shm"} {
				if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
					return nil, fmt.Errorf("bench: empty tables: %w", err)
				}
			}
			out = append(out, "sqlite:"+p)
		}
		return out, nil
	}
	if !strings.HasPrefix(url, "postgres") {
		return nil, errors.New("bench: --prefill and --fresh need PostgreSQL or SQLite")
	}
	conn, err := pgxpool.New(ctx, url) // takes the URL's pool_ parameters
	if err != nil {
		return nil, fmt.Errorf("bench: empty tables: %w", err)
	}
	defer conn.Close()
	var out []string
	for _, name := range names {
		schema := "bench_" + name
		for _, q := range []string{`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`, `CREATE SCHEMA ` + schema} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return nil, fmt.Errorf("bench: empty tables: %s: %w", q, err)
			}
		}
		out = append(out, schemaURL(url, schema))
	}
	return out, nil
}

// schemaURL returns the PostgreSQL URL url with schema as its search_path.
func schemaURL(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}

// prefillRow is one key that prefill writes, with its payment.
type prefillRow struct {
	client, key, payment string
	hash                 [32]byte
	created              time.Time
	body                 []byte
}

// prefillHeader is the stored header of every prefilled key, as the
// payments endpoint's responses are stored.
var prefillHeader = []byte(`{"Content-Type":["application/json"]}`)

// makeRow returns the ith of n keys of a fill: spread over
// prefillClients clients, created between from and to in the order of i,
// as a day of traffic arrives (the table's pages follow created_at, as
// the purge finds them), each at a random time in its share of the span.
func makeRow(r *rand.Rand, i, n int64, from, to time.Time) prefillRow {
	var seed [16]byte
	binary.BigEndian.PutUint64(seed[:], r.Uint64())
	binary.BigEndian.PutUint64(seed[8:], uint64(i))
	row := prefillRow{
		client:  fmt.Sprintf("client-%04d", r.IntN(prefillClients)),
		key:     fmt.Sprintf("%x-%x-%x-%x", seed[0:4], seed[4:6], seed[6:8], seed[8:16]),
		payment: fmt.Sprintf("pay_%x", seed),
		hash:    sha256.Sum256(seed[:]),
		created: from.Add(time.Duration((float64(i) + r.Float64()) / float64(n) * float64(to.Sub(from)))).Truncate(time.Microsecond),
	}
	row.body = fmt.Appendf(nil, `{"id":%q,"object":"payment","amount":4200,"currency":"usd","customer":"cus_bench","description":"","status":"succeeded","created":%d,"idempotency_key":%q}`,
		row.payment, row.created.Unix(), row.key)
	return row
}

// prefill fills db with cfg.Prefill completed keys created in the last 23
// hours, and with Config.PrefillPurge a backlog of a quarter as many
// created 25 to 48 hours ago, each with its payment, then vacuums and
// measures the key table.
func prefill(ctx context.Context, cfg Config, db *database.DB) (*PrefillOutcome, error) {
	out := &PrefillOutcome{Keys: cfg.Prefill}
	if cfg.PrefillPurge {
		out.Backlog = cfg.PrefillBacklog
		if out.Backlog <= 0 {
			out.Backlog = cfg.Prefill / 4
		}
	}
	now := time.Now()
	r := rand.New(rand.NewPCG(1, 2))
	total := out.Keys + out.Backlog
	// The expired backlog first, then the live keys: in the order of time.
	rowAt := func(i int64) prefillRow {
		if i < out.Backlog {
			return makeRow(r, i, out.Backlog, now.Add(-48*time.Hour), now.Add(-25*time.Hour))
		}
		return makeRow(r, i-out.Backlog, out.Keys, now.Add(-23*time.Hour), now.Add(-time.Minute))
	}
	fmt.Fprintf(cfg.Progress, "prefill: %d keys and %d expired ones\n", out.Keys, out.Backlog)
	begin := time.Now()
	var err error
	switch {
	case db.Postgres != nil:
		err = prefillPostgres(ctx, db, cfg, out, now)
	case db.SQLite != nil:
		err = prefillSQLite(ctx, db.SQLite.DB(), total, rowAt)
	default:
		err = errors.New("bench: --prefill needs PostgreSQL or SQLite")
	}
	if err != nil {
		return nil, err
	}
	out.Fill = time.Since(begin)
	if out.Size, err = keyTableSize(ctx, db); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "prefill: done in %s; key table %d bytes, indexes %d, TOAST %d: %.0f bytes per key\n",
		out.Fill.Round(time.Second), out.Size.Table, out.Size.Indexes, out.Size.Toast,
		float64(out.Size.Table+out.Size.Indexes+out.Size.Toast)/float64(total))
	return out, nil
}

// keyColumns are the columns that prefill writes to the key table.
var keyColumns = []string{"client_id", "idempotency_key", "request_method", "request_path", "request_hash",
	"status", "lease_token", "response_status", "response_headers", "response_body", "created_at", "locked_at", "completed_at"}

// prefillChunk is how many keys a statement of the fill writes.
const prefillChunk = 500_000

// queryPrefillKeys writes the keys $1 to $2 (excluded) of a span of $3
// keys created between $4 and $5, and their payments, generated by the
// server: the same rows as makeRow writes (a key of a UUID's shape and its
// payment's id from the MD5 of $6 and the key's number, a client of
// prefillClients, created at a random time in the key's share of the span,
// in the order of the keys), without a round trip or a COPY row per key.
// The payments are written by the same statement, in the same order.
const queryPrefillKeys = `WITH g AS (
    SELECT i, md5($6 || ':' || i) AS m,
           $4::timestamptz + (i - $7 + random()) / $3 * ($5::timestamptz - $4::timestamptz) AS created
    FROM generate_series($1::bigint, $2::bigint - 1) AS i
), r AS (
    SELECT i, m, date_trunc('microseconds', created) AS created,
           'client-' || lpad(((('x' || substr(m, 25, 8))::bit(32)::int & 2147483647) % $8)::text, 4, '0') AS client,
           substr(m, 1, 8) || '-' || substr(m, 9, 4) || '-' || substr(m, 13, 4) || '-' || substr(m, 17, 16) AS key,
           'pay_' || m AS payment
    FROM g
), pays AS (
    INSERT INTO payments (id, client_id, amount, currency, customer, description, status, created, idempotency_key)
    SELECT payment, client, 4200, 'usd', 'cus_bench', '', 'succeeded', extract(epoch FROM created)::bigint, key
    FROM r ORDER BY i
)
INSERT INTO idempotency_keys (client_id, idempotency_key, request_method, request_path, request_hash,
    status, lease_token, response_status, response_headers, response_body, created_at, locked_at, completed_at)
SELECT client, key, 'POST', '/v1/payments', sha256(decode(m, 'hex')), 'completed', 1, 201,
    '{"Content-Type":["application/json"]}'::jsonb,
    convert_to(format('{"id":"%s","object":"payment","amount":4200,"currency":"usd","customer":"cus_bench","description":"","status":"succeeded","created":%s,"idempotency_key":"%s"}',
        payment, extract(epoch FROM created)::bigint, key), 'UTF8'),
    created, created, created
FROM r ORDER BY i`

// prefillPostgres writes the backlog's keys, then the live ones, each
// chunk by one statement that the server fills itself (a COPY of 10M rows
// from this process took most of an hour here), then VACUUM ANALYZE: the
// table as a day of traffic and autovacuum leave it, but for its indexes.
// Those are dropped while the tables fill and built again after, as
// pg_restore does (the random inserts of 14M keys into the primary key
// filled 2,000 keys a second here, under load): they are as CREATE INDEX
// leaves them, denser than a day of random inserts would. Autovacuum is
// off for the two tables while they fill (it would scan them again and
// again as inserts pass its threshold) and back on before the run.
func prefillPostgres(ctx context.Context, db *database.DB, cfg Config, out *PrefillOutcome, now time.Time) error {
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("bench: prefill: %w", err)
	}
	defer conn.Release()
	var rebuild []string
	rows, err := conn.Query(ctx, queryPrefillIndexes)
	if err != nil {
		return fmt.Errorf("bench: prefill: %w", err)
	}
	var drops []string
	for rows.Next() {
		var drop, create string
		if err := rows.Scan(&drop, &create); err != nil {
			rows.Close()
			return fmt.Errorf("bench: prefill: %w", err)
		}
		drops, rebuild = append(drops, drop), append(rebuild, create)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("bench: prefill: %w", err)
	}
	for _, q := range append([]string{`ALTER TABLE idempotency_keys SET (autovacuum_enabled = false)`,
		`ALTER TABLE payments SET (autovacuum_enabled = false)`}, drops...) {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("bench: prefill: %s: %w", q, err)
		}
	}
	seed := fmt.Sprintf("bench-%d", now.UnixNano())
	spans := []struct {
		n        int64
		from, to time.Time
	}{
		{out.Backlog, now.Add(-48 * time.Hour), now.Add(-25 * time.Hour)},
		{out.Keys, now.Add(-23 * time.Hour), now.Add(-time.Minute)},
	}
	var first int64
	for _, s := range spans {
		for done := int64(0); done < s.n; done += prefillChunk {
			lo, hi := first+done, first+min(done+prefillChunk, s.n)
			if _, err := conn.Exec(ctx, queryPrefillKeys, lo, hi, s.n, s.from, s.to, seed, first, prefillClients); err != nil {
				return fmt.Errorf("bench: prefill keys: %w", err)
			}
			if (hi-first)%(5*prefillChunk) == 0 || hi-first == s.n {
				fmt.Fprintf(cfg.Progress, "prefill: %d of %d keys\n", hi, out.Keys+out.Backlog)
			}
		}
		first += s.n
	}
	fmt.Fprintf(cfg.Progress, "prefill: building %d indexes\n", len(rebuild))
	for _, q := range append([]string{`SET maintenance_work_mem = '512MB'`}, append(rebuild,
		`RESET maintenance_work_mem`,
		`ALTER TABLE idempotency_keys RESET (autovacuum_enabled)`, `ALTER TABLE payments RESET (autovacuum_enabled)`,
		`VACUUM ANALYZE idempotency_keys, payments`)...) {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("bench: prefill: %s: %w", q, err)
		}
	}
	return nil
}

// queryPrefillIndexes returns, for each index of the key and payments
// tables, the statement that drops it and the one that builds it again:
// for a primary key or unique constraint, of the constraint.
const queryPrefillIndexes = `SELECT
    CASE WHEN c.oid IS NULL THEN format('DROP INDEX %I', i.relname)
         ELSE format('ALTER TABLE %I DROP CONSTRAINT %I', t.relname, c.conname) END,
    CASE WHEN c.oid IS NULL THEN pg_get_indexdef(i.oid)
         ELSE format('ALTER TABLE %I ADD CONSTRAINT %I %s', t.relname, c.conname, pg_get_constraintdef(c.oid)) END
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.contype IN ('p', 'u')
WHERE x.indrelid IN ('idempotency_keys'::regclass, 'payments'::regclass)
ORDER BY t.relname, i.relname`

// prefillSQLite writes n rows in transactions of 100,000 (SQLite has no
// COPY; one prepared insert per row is its fastest path), then ANALYZE.
func prefillSQLite(ctx context.Context, db *sql.DB, n int64, rowAt func(int64) prefillRow) error {
	keyInsert := `INSERT INTO idempotency_keys (` + strings.Join(keyColumns, ", ") + `) VALUES (?` + strings.Repeat(", ?", len(keyColumns)-1) + `)`
	const chunk = 100_000
	for done := int64(0); done < n; done += chunk {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("bench: prefill: %w", err)
		}
		keys, err := tx.PrepareContext(ctx, keyInsert)
		if err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("bench: prefill: %w", err)
		}
		pays, err := tx.PrepareContext(ctx, payments.SQLiteInsert)
		if err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("bench: prefill: %w", err)
		}
		for i := done; i < min(done+chunk, n); i++ {
			w := rowAt(i)
			us := w.created.UnixMicro()
			if _, err = keys.ExecContext(ctx, w.client, w.key, "POST", "/v1/payments", w.hash[:], "completed", 1, 201,
				prefillHeader, w.body, us, us, us); err == nil {
				_, err = pays.ExecContext(ctx, w.payment, w.client, 4200, "usd", "cus_bench", "", "succeeded", w.created.Unix(), w.key)
			}
			if err != nil {
				_ = tx.Rollback()
				return fmt.Errorf("bench: prefill: %w", err)
			}
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("bench: prefill: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, `ANALYZE`); err != nil {
		return fmt.Errorf("bench: prefill: analyze: %w", err)
	}
	return nil
}

// keyTableSize measures the key table: on PostgreSQL its heap, its
// indexes and its TOAST table; on SQLite its pages, from dbstat when the
// build has it, else the whole file.
func keyTableSize(ctx context.Context, db *database.DB) (TableSize, error) {
	var s TableSize
	if db.Postgres != nil {
		var total int64
		err := db.Pool.QueryRow(ctx, `SELECT pg_relation_size('idempotency_keys'), pg_indexes_size('idempotency_keys'),
       pg_total_relation_size('idempotency_keys')`).Scan(&s.Table, &s.Indexes, &total)
		if err != nil {
			return s, fmt.Errorf("bench: key table size: %w", err)
		}
		s.Toast = total - s.Table - s.Indexes
		return s, nil
	}
	sq := db.SQLite.DB()
	err := sq.QueryRowContext(ctx, `SELECT
    coalesce(sum(pgsize) FILTER (WHERE name = 'idempotency_keys'), 0),
    coalesce(sum(pgsize) FILTER (WHERE name = 'idempotency_keys_created_idx'), 0)
FROM dbstat`).Scan(&s.Table, &s.Indexes)
	if err == nil {
		return s, nil
	}
	if err := sq.QueryRowContext(ctx, `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&s.Table); err != nil {
		return s, fmt.Errorf("bench: key table size: %w", err)
	}
	return s, nil
}

// purgeDuring runs the store's purge of keys past the default retention on
// db, in batches of p.BatchSize keys (0: the store's default), paced by
// p.Share as the purge service is, until the returned function is called or
// nothing is left to delete, and adds what it deleted and the time it ran
// to o. The function cancels the batch under
// way (which then deletes nothing), waits for the purge to end and
// returns its error, if it failed other than by being stopped.
func (o *PrefillOutcome) purgeDuring(ctx context.Context, db *database.DB, p database.PurgeParams) (stop func() error) {
	purgeCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	begin := time.Now()
	go func() {
		p.Before = begin.Add(-24 * time.Hour)
		n, err := db.Purge(purgeCtx, p)
		if n > 0 {
			o.PurgeTime += time.Since(begin)
		}
		if purgeCtx.Err() != nil && ctx.Err() == nil {
			err = nil // stopped, as asked
		}
		done <- err
	}()
	return func() error {
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("bench: purge: %w", err)
		}
		return nil
	}
}
