package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/proxy"
	"github.com/idemkit/idem/internal/cmdrun"
)

const keysUsage = `Usage:
  idemproxy held    [-db URL]                       list keys held after an unknown outcome
  idemproxy release [-db URL] -client-id ID -key KEY  free a held key

Under the hold policy, a key whose forward had an unknown outcome answers
every retry with the same outcome-unknown problem, and nothing is
forwarded. Find out from the upstream whether the operation happened; if it
did not, release the key: the client's next retry with it is forwarded. If it
did, leave the key held (it expires with the retention period) and tell the
client. release frees only held keys, never a stored response.

Under the probe policy such a key is held the same way until a retry's probe
of the upstream's status URL settles it; held lists these too (POLICY probe,
those no retry is probing now), and release frees one for an upstream whose
status URL cannot answer for it: its next retry is forwarded, unprobed.

Flags:
`

// held rows select keys completed with the proxy's outcome-unknown problem
// (hold routes), keys left unknown on probe routes (started, at the
// recovery point proxy.RecoveryOutcomeUnknown), and hold routes' keys left
// at proxy.RecoveryForwarded by a forward whose answer could not be stored
// (their next retry is held): started, with no holder (locked_at NULL). A
// retry that claims such a key sets locked_at, so release never deletes a
// key that a retry is probing or forwarding. A held answer stored by an
// earlier version carries the proxy's former code for the problem,
// legacyHeldMarker's.
const (
	heldMarker       = `"code":"` + string(idem.ProblemOutcomeUnknown) + `"`
	legacyHeldMarker = `"code":"idempotency-outcome-unknown"`
	holdMarker       = `"policy":"` + string(proxy.PolicyHold) + `"`
	sqliteHeldWhere  = `((status = 'completed' AND response_status IN (502, 504) AND (instr(response_body, CAST(?1 AS BLOB)) > 0 OR instr(response_body, CAST(?5 AS BLOB)) > 0))
   OR (status = 'started' AND locked_at IS NULL AND (recovery_point = ?2 OR (recovery_point = ?3 AND instr(recovery_state, CAST(?4 AS BLOB)) > 0))))`
	sqliteHeld        = `SELECT client_id, idempotency_key, request_method, request_path, created_at, status, coalesce(recovery_point, '') FROM idempotency_keys WHERE ` + sqliteHeldWhere + ` ORDER BY created_at`
	sqliteRelease     = `DELETE FROM idempotency_keys WHERE client_id = ?6 AND idempotency_key = ?7 AND ` + sqliteHeldWhere
	postgresHeldWhere = `((status = 'completed' AND response_status IN (502, 504) AND (position(convert_to($1, 'UTF8') in response_body) > 0 OR position(convert_to($5, 'UTF8') in response_body) > 0))
   OR (status = 'started' AND locked_at IS NULL AND (recovery_point = $2 OR (recovery_point = $3 AND position(convert_to($4, 'UTF8') in recovery_state) > 0))))`
	postgresHeld    = `SELECT client_id, idempotency_key, request_method, request_path, created_at, status, coalesce(recovery_point, '') FROM idempotency_keys WHERE ` + postgresHeldWhere + ` ORDER BY created_at`
	postgresRelease = `DELETE FROM idempotency_keys WHERE client_id = $6 AND idempotency_key = $7 AND ` + postgresHeldWhere
)

// heldKey is a key held after an unknown outcome.
type heldKey struct {
	clientID, key, method, path string
	created                     time.Time
	status                      string // completed (hold) or started
	point                       string // the recovery point of a started key
}

// policy names the policy that holds the key.
func (k heldKey) policy() string {
	if k.status == "started" && k.point == proxy.RecoveryOutcomeUnknown {
		return string(proxy.PolicyProbe)
	}
	return string(proxy.PolicyHold)
}

// runKeys runs "idemproxy held" and "idemproxy release".
func runKeys(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	fs := flag.NewFlagSet("idemproxy "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), keysUsage)
		fs.PrintDefaults()
	}
	db := fs.String("db", "sqlite:idemproxy.db", "key store: sqlite:PATH, postgres://..., mysql://..., redis://host:port/N or redis-cluster://host:port,... (env IDEMPROXY_DB)")
	clientID := fs.String("client-id", "", "client `id` of the key, as held lists it (release)")
	key := fs.String("key", "", "the `key` to release (release)")
	if err := fs.Parse(args); err != nil {
		return cmdrun.Usage(err)
	}
	if fs.NArg() > 0 {
		return cmdrun.Usage(fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	dbSet := false
	fs.Visit(func(f *flag.Flag) { dbSet = dbSet || f.Name == "db" })
	if v, ok := lookup("IDEMPROXY_DB"); ok && !dbSet {
		*db = v // not the flag's default, which -h would print
	}
	if cmd == "release" && (*clientID == "" || *key == "") {
		return cmdrun.Usage(errors.New("release needs -client-id and -key"))
	}
	ks, err := openKeySQL(ctx, *db)
	if err != nil {
		return err
	}
	defer ks.close()
	if cmd == "held" {
		keys, err := ks.held(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIENT ID\tKEY\tREQUEST\tPOLICY\tCREATED")
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\n", k.clientID, k.key, k.method, k.path, k.policy(), k.created.UTC().Format(time.RFC3339))
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d held %s\n", len(keys), plural(len(keys), "key", "keys"))
		return nil
	}
	n, err := ks.release(ctx, *clientID, *key)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no held key %q for client %s: it is not held (released, expired, or holding a real response)", *key, *clientID)
	}
	fmt.Fprintf(stdout, "released key %q of client %s; its next retry is forwarded\n", *key, *clientID)
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// keySQL reads and deletes held keys in a key store.
type keySQL struct {
	held    func(ctx context.Context) ([]heldKey, error)
	release func(ctx context.Context, clientID, key string) (int64, error)
	close   func()
}

func openKeySQL(ctx context.Context, url string) (*keySQL, error) {
	d, err := database.Open(ctx, url, &database.Config{Logger: slog.New(slog.DiscardHandler), Redis: true})
	if err != nil {
		return nil, err
	}
	if d.Redis != nil {
		return redisKeys(d.Redis, d.Close), nil
	}
	if d.MySQL != nil {
		return mysqlKeySQL(d), nil
	}
	if d.SQLite != nil {
		db := d.SQLite.DB()
		return &keySQL{
			held: func(ctx context.Context) ([]heldKey, error) {
				rows, err := db.QueryContext(ctx, sqliteHeld, heldMarker, proxy.RecoveryOutcomeUnknown, proxy.RecoveryForwarded, holdMarker, legacyHeldMarker)
				if err != nil {
					return nil, fmt.Errorf("list held keys: %w", err)
				}
				return scanHeld(rows, func(micros int64) time.Time { return time.UnixMicro(micros) })
			},
			release: func(ctx context.Context, clientID, key string) (int64, error) {
				res, err := db.ExecContext(ctx, sqliteRelease, heldMarker, proxy.RecoveryOutcomeUnknown, proxy.RecoveryForwarded, holdMarker, legacyHeldMarker, clientID, key)
				if err != nil {
					return 0, fmt.Errorf("release: %w", err)
				}
				return res.RowsAffected()
			},
			close: d.Close,
		}, nil
	}
	pool := d.Pool
	return &keySQL{
		held: func(ctx context.Context) ([]heldKey, error) {
			rows, err := pool.Query(ctx, postgresHeld, heldMarker, proxy.RecoveryOutcomeUnknown, proxy.RecoveryForwarded, holdMarker, legacyHeldMarker)
			if err != nil {
				return nil, fmt.Errorf("list held keys: %w", err)
			}
			defer rows.Close()
			var out []heldKey
			for rows.Next() {
				var k heldKey
				if err := rows.Scan(&k.clientID, &k.key, &k.method, &k.path, &k.created, &k.status, &k.point); err != nil {
					return nil, fmt.Errorf("list held keys: %w", err)
				}
				out = append(out, k)
			}
			return out, rows.Err()
		},
		release: func(ctx context.Context, clientID, key string) (int64, error) {
			tag, err := pool.Exec(ctx, postgresRelease, heldMarker, proxy.RecoveryOutcomeUnknown, proxy.RecoveryForwarded, holdMarker, legacyHeldMarker, clientID, key)
			if err != nil {
				return 0, fmt.Errorf("release: %w", err)
			}
			return tag.RowsAffected(), nil
		},
		close: d.Close,
	}, nil
}

func scanHeld(rows *sql.Rows, toTime func(int64) time.Time) ([]heldKey, error) {
	defer rows.Close()
	var out []heldKey
	for rows.Next() {
		var k heldKey
		var created int64
		if err := rows.Scan(&k.clientID, &k.key, &k.method, &k.path, &created, &k.status, &k.point); err != nil {
			return nil, fmt.Errorf("list held keys: %w", err)
		}
		k.created = toTime(created)
		out = append(out, k)
	}
	return out, rows.Err()
}
