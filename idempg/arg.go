package idempg

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem/idemstore"
)

// Arguments that pgx encodes without allocating.
//
// A string, a []byte, a time.Time or an int64 past 255 passed to pgx is
// copied into an interface value, an allocation each, and pgx wraps a
// time.Time in another before it encodes it. A pointer goes into an
// interface as it is. The types below are pointed at fields that already
// live in a lease's allocation; pgx encodes each through the valuer
// interface of the column's codec (text, bytea, int8 or int4,
// timestamptz), by a plan of its own that needs no wrapper, into the same
// bytes as the plain value. A nil pointer is sent as NULL, as a nil
// *string or *time.Time is.
//
// They need the parameter's type from the server: pgx knows it once the
// statement is prepared or described (every mode but QueryExecModeExec and
// QueryExecModeSimpleProtocol). In those two modes pgx finds the type from
// the Go value, which it could not do from these, so the plain values are
// sent then (Store.typedArgs).
type (
	// textArg is a text parameter.
	textArg string
	// bytesArg is a bytea parameter; nil is NULL.
	bytesArg []byte
	// intArg is an int8 or int4 parameter.
	intArg int64
	// timeArg is a timestamptz parameter.
	timeArg time.Time
)

// TextValue implements pgtype.TextValuer.
func (a *textArg) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*a), Valid: true}, nil
}

// BytesValue implements pgtype.BytesValuer.
func (a *bytesArg) BytesValue() ([]byte, error) { return []byte(*a), nil }

// Int64Value implements pgtype.Int64Valuer.
func (a *intArg) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*a), Valid: true}, nil
}

// TimestamptzValue implements pgtype.TimestamptzValuer.
func (a *timeArg) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*a), Valid: true}, nil
}

// typedArgs reports whether pgx learns the parameters' types from the
// server in mode, which the argument types above need.
func typedArgs(mode pgx.QueryExecMode) bool {
	return mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeSimpleProtocol
}

// headerArg is the argument of a stored response's header, JSON for the
// jsonb column response_headers. With the parameter's type known (typed)
// pgx writes the bytes as JSON; without it (QueryExecModeExec and
// QueryExecModeSimpleProtocol) it would write a []byte as bytea, which the
// server cannot read as JSON, and a string goes as text, which it can.
func headerArg(header []byte, typed bool) any {
	if typed || header == nil {
		return header
	}
	return string(header)
}

// sessionArgs are querySessionClaim's arguments, in one allocation: the
// client, the key, the key's lock and the retention cutoff.
type sessionArgs struct {
	clientID, key string
	lock          int64
	cutoff        time.Time
	args          [4]any
}

// sessionClaimArgs returns querySessionClaim's arguments for scope; with
// retention set, keys created at or before cutoff are past it (NULL
// otherwise).
func (s *Store) sessionClaimArgs(scope idemstore.Scope, lock int64, cutoff time.Time, retention bool) []any {
	a := &sessionArgs{clientID: scope.ClientID, key: scope.Key, lock: lock, cutoff: cutoff}
	if !s.typedArgs {
		var c *time.Time // NULL
		if retention {
			c = &a.cutoff
		}
		a.args = [4]any{a.clientID, a.key, a.lock, c}
		return a.args[:]
	}
	var c *timeArg // NULL
	if retention {
		c = (*timeArg)(&a.cutoff)
	}
	a.args = [4]any{(*textArg)(&a.clientID), (*textArg)(&a.key), (*intArg)(&a.lock), c}
	return a.args[:]
}

// claimInsertArgs are queryClaimInsert's arguments (claimStatement), in
// one allocation.
type claimInsertArgs struct {
	lock                                   int64
	clientID, key, method, path, lockLimit string
	trace                                  string
	hash, fields                           []byte
	now, expires                           time.Time
	args                                   [11]any
}

// claimInsertArgsOf returns queryClaimInsert's arguments for p, with the
// key's lock, the claim's lock_timeout and its request fields (nil for
// none), as arguments of arg.go.
func claimInsertArgsOf(p *idemstore.ClaimParams, lock int64, lockTimeout string, fields []byte) []any {
	a := &claimInsertArgs{lock: lock, clientID: p.Scope.ClientID, key: p.Scope.Key, method: p.Method, path: p.Path,
		lockLimit: lockTimeout, trace: p.TraceContext, hash: p.RequestHash, fields: fields, now: p.Now, expires: p.LeaseExpires()}
	var expires *timeArg // NULL, as leaseExpires
	if !a.expires.IsZero() {
		expires = (*timeArg)(&a.expires)
	}
	var trace *textArg // NULL, as traceContext
	if a.trace != "" {
		trace = (*textArg)(&a.trace)
	}
	a.args = [11]any{(*intArg)(&a.lock), (*textArg)(&a.clientID), (*textArg)(&a.key), (*textArg)(&a.method), (*textArg)(&a.path),
		(*bytesArg)(&a.hash), (*bytesArg)(&a.fields), (*timeArg)(&a.now), (*textArg)(&a.lockLimit), expires, trace}
	return a.args[:]
}
