package idempg_test

import (
	"bytes"
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
)

// errRetryLater means another consumer holds the message's key.
var errRetryLater = errors.New("the message is being applied elsewhere; retry later")

// A queue consumer that applies each message once, in its own transaction:
// it claims the message's key in that transaction, does the work through
// the lease, and the key commits with the work. The request hash comes
// from idemfingerprint.New, as the middleware computes it for an HTTP
// request, so a message redelivered with another body is caught.
func ExampleStore_ClaimTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := idempg.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}

	type message struct {
		Sender, Key string
		Body        []byte // JSON
	}
	apply := func(ctx context.Context, msg message) error {
		fp, err := idemfingerprint.New(idemfingerprint.Params{
			Method: "CONSUME", Path: "/queues/payments", ContentType: "application/json", Body: msg.Body,
		})
		if err != nil {
			return err // a body that cannot be fingerprinted: dead-letter the message
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := store.ClaimTx(ctx, tx, idemstore.ClaimParams{
				Scope:  idemstore.Scope{ClientID: msg.Sender, Key: msg.Key},
				Method: "CONSUME", Path: "/queues/payments",
				RequestHash: fp.Hash, RequestFields: fp.Fields,
				Now:         time.Now(),
				LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
			})
			switch {
			case err != nil:
				return err
			case res.Record != nil && !bytes.Equal(res.Record.RequestHash, fp.Hash):
				return errors.New("the key was first used with another message") // dead-letter it
			case res.Record != nil && res.Record.Status == idemstore.StatusCompleted:
				return nil // applied before: acknowledge it
			case res.Record != nil:
				return errRetryLater
			}
			// The lease's context carries the savepoint that ClaimTx opened
			// in tx: the work written through it commits with the key.
			work, err := idempg.TxFromContext(res.Lease.Context(ctx))
			if err != nil {
				return err
			}
			if _, err := work.Exec(ctx, `INSERT INTO payments (body) VALUES ($1)`, msg.Body); err != nil {
				res.Lease.Release(ctx) // so does the rollback of tx
				return err
			}
			return res.Lease.Complete(ctx, &idemstore.Response{StatusCode: http.StatusOK})
		})
	}
	if err := apply(ctx, message{Sender: "billing", Key: "invoice-42", Body: []byte(`{"amount":4200}`)}); err != nil {
		log.Fatal(err)
	}
}
