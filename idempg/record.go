package idempg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/record"
)

// queryRower is what loadKey reads through: a pooled connection, or a
// caller's transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadKey reads a key through q, without its lock; rec is nil when there
// is none.
func loadKey(ctx context.Context, q queryRower, scope idemstore.Scope) (*idemstore.Record, error) {
	rec, _, err := scanKey(q.QueryRow(ctx, queryLoadKey, scope.ClientID, scope.Key), scope)
	return rec, err
}

// scanKey scans a row of querySessionClaim or queryLoadKey; rec is nil
// when there is no key. locked is the first column: whether
// querySessionClaim took the key's lock (true for queryLoadKey).
func scanKey(row pgx.Row, scope idemstore.Scope) (rec *idemstore.Record, locked bool, err error) {
	var (
		method, path, status *string
		hash, fields         []byte
		token                *int64
		respStatus           *int32
		respHeader, respBody []byte
		createdAt, lockedAt  *time.Time
		leaseExpires         *time.Time
		trace                *string
	)
	err = row.Scan(
		&locked, &method, &path, &hash, &fields, &status, &token,
		&respStatus, &respHeader, &respBody, &createdAt, &lockedAt, &leaseExpires, &trace)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if method == nil { // the probe's outer join found no key
		return nil, locked, nil
	}
	rec = &idemstore.Record{
		Scope: scope, Method: *method, Path: *path,
		RequestHash: hash, RequestFields: fields,
		Status: idemstore.Status(*status), Token: *token, CreatedAt: createdAt.UTC(),
	}
	if trace != nil {
		rec.TraceContext = *trace
	}
	if lockedAt != nil {
		rec.LockedAt = lockedAt.UTC()
		if leaseExpires != nil {
			rec.LeaseExpires = leaseExpires.UTC()
		}
	}
	if rec.Status == idemstore.StatusCompleted {
		code := 0
		if respStatus != nil {
			code = int(*respStatus)
		}
		if rec.Response, err = record.DecodeResponse(code, respHeader, respBody); err != nil {
			return nil, false, err
		}
	}
	return rec, locked, nil
}
