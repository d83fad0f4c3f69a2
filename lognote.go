package idem

import (
	"context"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keyspec"
	"github.com/idemkit/idem/internal/reqlog"
)

// What the middleware and the key-status handler learn about a request,
// for its line in idemlog's request log. idemlog puts a reqlog.Info in the
// request's context; without one, these do nothing.

// noteScope records the client and the key of a request in its log line.
func noteScope(ctx context.Context, scope idemstore.Scope) {
	if info, ok := reqlog.FromContext(ctx); ok {
		digest := ""
		if scope.Key != "" {
			digest = keyspec.Digest(scope.Key)
		}
		info.SetScope(scope.ClientID, digest)
	}
}

// resultNoter passes results on to the application's Metrics and records
// each request's final result in its log line.
// With a Tracer, it records the result for the request's span too.
type resultNoter struct {
	next   Metrics
	traced bool
}

func (n *resultNoter) Request(ctx context.Context, r Result) {
	n.next.Request(ctx, r)
	if r == ResultTakenOver || r == ResultConflictRerun {
		return // counted in addition to the final result
	}
	if n.traced {
		if note, ok := ctx.Value(traceNoteKey{}).(*traceNote); ok {
			note.result = r
		}
	}
	if info, ok := reqlog.FromContext(ctx); ok {
		info.SetResult(string(r))
	}
}

func (n *resultNoter) Claim(ctx context.Context, d time.Duration, err error) {
	n.next.Claim(ctx, d, err)
}
