package idempg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

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
//
// The nullable columns are scanned into pgtype's value types rather than
// into pointers: pgx plans a scan into a pointer to a pointer anew for
// each row, and allocates both the plan and the value, about twenty
// allocations per read of a key; its value types need neither.
func scanKey(row pgx.Row, scope idemstore.Scope) (rec *idemstore.Record, locked bool, err error) {
	var (
		method, path, status pgtype.Text
		hash, fields         []byte
		token                pgtype.Int8
		respStatus           pgtype.Int4
		respHeader, respBody []byte
		createdAt, lockedAt  pgtype.Timestamptz
		leaseExpires         pgtype.Timestamptz
		trace                pgtype.Text
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
	if !method.Valid { // the probe's outer join found no key
		return nil, locked, nil
	}
	if !path.Valid || !status.Valid || !token.Valid || !createdAt.Valid {
		return nil, false, errors.New("idempg: read key: a required column is NULL")
	}
	for _, t := range [...]*pgtype.Timestamptz{&createdAt, &lockedAt, &leaseExpires} {
		if t.Valid && t.InfinityModifier != pgtype.Finite {
			// A time.Time cannot hold it: scanning into one fails alike.
			return nil, false, errors.New("idempg: read key: cannot scan an infinite timestamp into a time")
		}
	}
	rec = &idemstore.Record{
		Scope: scope, Method: method.String, Path: path.String,
		RequestHash: hash, RequestFields: fields,
		Status: idemstore.Status(status.String), Token: token.Int64, CreatedAt: createdAt.Time.UTC(),
	}
	if trace.Valid {
		rec.TraceContext = trace.String
	}
	if lockedAt.Valid {
		rec.LockedAt = lockedAt.Time.UTC()
		if leaseExpires.Valid {
			rec.LeaseExpires = leaseExpires.Time.UTC()
		}
	}
	if rec.Status == idemstore.StatusCompleted {
		code := 0
		if respStatus.Valid {
			code = int(respStatus.Int32)
		}
		if rec.Response, err = record.DecodeResponse(code, respHeader, respBody); err != nil {
			return nil, false, err
		}
	}
	return rec, locked, nil
}
