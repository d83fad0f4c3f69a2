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
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
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
	// PurgeRows is how many keys the purge deleted while the prefilled
	// table was measured, in PurgeTime (Config.PrefillPurge).
	PurgeRows int64
	PurgeTime time.Duration

	mu sync.Mutex // guards PurgeRows, PurgeTime
}

// TableSize is a key table's size on disk, in bytes. On SQLite, Table is
// the whole key table (a WITHOUT ROWID table is its primary key's index)
// and Indexes its other index.
type TableSize struct {
	Table, Indexes, Toast int64
}

// prefillClients is how many clients the prefilled keys are spread over.
const prefillClients = 1000

// prefillURLs returns the URLs of the prefilled and the empty side of a run
// on url, each made empty first.
func prefillURLs(ctx context.Context, url string) ([]string, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		empty := path + "-empty"
		for _, p := range []string{path, empty} {
			for _, f := range []string{p, p + "-wal", p + "-shm"} {
				if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
					return nil, fmt.Errorf("bench: prefill: %w", err)
				}
			}
		}
		return []string{url, "sqlite:" + empty}, nil
	}
	if !strings.HasPrefix(url, "postgres") {
		return nil, errors.New("bench: --prefill needs PostgreSQL or SQLite")
	}
	conn, err := pgxpool.New(ctx, url) // takes the URL's pool_ parameters
	if err != nil {
		return nil, fmt.Errorf("bench: prefill: %w", err)
	}
	defer conn.Close()
	var out []string
	for _, schema := range []string{"bench_prefill", "bench_empty"} {
		for _, q := range []string{`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`, `CREATE SCHEMA ` + schema} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return nil, fmt.Errorf("bench: prefill: %s: %w", q, err)
			}
		}
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		out = append(out, url+sep+"search_path="+schema)
	}
	return out, nil
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
		out.Backlog = cfg.Prefill / 4
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
		err = prefillPostgres(ctx, db, total, rowAt)
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

var paymentColumns = []string{"id", "client_id", "amount", "currency", "customer", "description", "status", "created", "idempotency_key"}

// prefillPostgres writes n rows by COPY, keys and payments side by side,
// then VACUUM ANALYZE: the table as a day of traffic and autovacuum
// leave it.
func prefillPostgres(ctx context.Context, db *database.DB, n int64, rowAt func(int64) prefillRow) error {
	const chunk = 100_000
	for done := int64(0); done < n; done += chunk {
		rows := make([]prefillRow, min(chunk, n-done))
		for i := range rows {
			rows[i] = rowAt(done + int64(i))
		}
		_, err := db.Pool.CopyFrom(ctx, pgx.Identifier{"idempotency_keys"}, keyColumns, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			w := rows[i]
			return []any{w.client, w.key, "POST", "/v1/payments", w.hash[:], "completed", int64(1), int32(201),
				prefillHeader, w.body, w.created, w.created, w.created}, nil
		}))
		if err != nil {
			return fmt.Errorf("bench: prefill keys: %w", err)
		}
		_, err = db.Pool.CopyFrom(ctx, pgx.Identifier{"payments"}, paymentColumns, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			w := rows[i]
			return []any{w.payment, w.client, int64(4200), "usd", "cus_bench", "", "succeeded", w.created.Unix(), w.key}, nil
		}))
		if err != nil {
			return fmt.Errorf("bench: prefill payments: %w", err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE idempotency_keys, payments`); err != nil {
		return fmt.Errorf("bench: prefill: vacuum: %w", err)
	}
	return nil
}

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

// purgeDuring runs the purge of keys past the default retention without
// pause on db until the returned function is called, or until nothing is
// left to delete, and adds what it deleted and the time it ran to o. The
// function lets a purge run that has begun end (it deletes in batches of
// its own until none is left), so that what it counts is what it deleted.
func (o *PrefillOutcome) purgeDuring(ctx context.Context, db *database.DB) (stop func()) {
	var stopped atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stopped.Load() && ctx.Err() == nil {
			begin := time.Now()
			n, err := db.Purge(ctx, database.PurgeParams{Before: time.Now().Add(-24 * time.Hour)})
			o.mu.Lock()
			o.PurgeRows += n
			if n > 0 {
				o.PurgeTime += time.Since(begin)
			}
			o.mu.Unlock()
			if err != nil || n == 0 {
				return
			}
		}
	}()
	return func() {
		stopped.Store(true)
		<-done
	}
}
