package idemredis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemkit/idem/idemstore"
)

// lease is a two-phase lease, fenced by its token and nonce. It is not
// safe for concurrent use, as no lease is.
type lease struct {
	store *Store
	key   string
	token string
	nonce string
	info  idemstore.LeaseInfo
	ended bool
}

type leaseKey struct{}

// Context returns ctx with the lease; the store has no transaction to
// carry.
func (l *lease) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

func (l *lease) Info() idemstore.LeaseInfo { return l.info }

func (l *lease) Complete(ctx context.Context, resp *idemstore.Response) error {
	if l.ended {
		return fmt.Errorf("idemredis: complete key: %w", idemstore.ErrLeaseEnded)
	}
	hd, err := encodeHeader(resp.Header)
	if err != nil {
		return fmt.Errorf("idemredis: complete key: %w", err)
	}
	keep := ""
	if l.store.cfg.MinReplicas > 0 {
		keep = "keep" // the recovery point, for uncompleteScript
	}
	raw, err := l.store.run(ctx, completeScript, l.key, true, l.token, l.nonce, resp.StatusCode, hd, resp.Body, keep)
	var short errReplicas
	if err != nil && !errors.As(err, &short) {
		return unknown("complete key", err)
	}
	reply, _ := raw.([]any)
	if len(reply) == 0 {
		return fmt.Errorf("idemredis: complete key: unexpected reply %v", raw)
	}
	switch reply[0] {
	case "ok":
		if short.want > 0 {
			// Completed on the primary only, where a failover may lose it:
			// undo it, so that the store reports what it did (nothing
			// stored, the lease still open for the Release that follows a
			// failed Complete) and never a result it cannot keep. Only if
			// the undo gets no answer is the outcome unknown.
			err := uncompleteScript.Run(context.WithoutCancel(ctx), l.store.rdb, []string{l.key}, l.token, l.nonce).Err()
			if err != nil {
				return unknown("complete key", fmt.Errorf("%w, and undoing the completion failed: %w", short, err))
			}
			return unavailable("complete key", short)
		}
		l.ended = true
		return nil
	case "completed":
		l.ended = true
		fields, _ := reply[1].([]any)
		rec, err := decodeRecord(fields)
		if err != nil {
			return fmt.Errorf("idemredis: complete key: %w", err)
		}
		return fmt.Errorf("idemredis: complete key (token %s): %w", l.token, &idemstore.CompletedError{Record: rec})
	}
	l.ended = true
	return fmt.Errorf("idemredis: complete key (token %s): %w", l.token, idemstore.ErrLeaseLost)
}

func (l *lease) Release(ctx context.Context) error {
	if l.ended {
		return fmt.Errorf("idemredis: release key: %w", idemstore.ErrLeaseEnded)
	}
	if err := releaseScript.Run(ctx, l.store.rdb, []string{l.key}, l.token, l.nonce, "").Err(); err != nil {
		return unavailable("release key", err)
	}
	l.ended = true
	return nil
}

// Recovery implements [idemstore.RecoveryLease].
func (l *lease) Recovery(ctx context.Context) (idemstore.Recovery, error) {
	if l.ended {
		return idemstore.Recovery{}, fmt.Errorf("idemredis: read recovery point: %w", idemstore.ErrLeaseEnded)
	}
	v, err := l.store.rdb.HMGet(ctx, l.key, "st", "tok", "n", "rp", "rs").Result()
	if err != nil {
		return idemstore.Recovery{}, unavailable("read recovery point", err)
	}
	if v[0] != string(idemstore.StatusInFlight) || v[1] != l.token || v[2] != l.nonce {
		return idemstore.Recovery{}, fmt.Errorf("idemredis: read recovery point (token %s): %w", l.token, idemstore.ErrLeaseLost)
	}
	point, _ := v[3].(string)
	if point == "" {
		return idemstore.Recovery{Point: idemstore.RecoveryStarted}, nil
	}
	r := idemstore.Recovery{Point: point}
	if st, _ := v[4].(string); st != "" {
		if err := json.Unmarshal([]byte(st), &r.State); err != nil {
			return idemstore.Recovery{}, fmt.Errorf("idemredis: read recovery point: %w", err)
		}
	}
	return r.Clone(), nil
}

// Checkpoint implements [idemstore.RecoveryLease]: it saves the point
// and its state if the lease still holds the key. There are no writes of
// the handler's to commit with it.
func (l *lease) Checkpoint(ctx context.Context, r idemstore.Recovery) error {
	if l.ended {
		return fmt.Errorf("idemredis: checkpoint: %w", idemstore.ErrLeaseEnded)
	}
	state, err := encodeState(r)
	if err != nil {
		return fmt.Errorf("idemredis: checkpoint: %w", err)
	}
	raw, err := l.store.run(ctx, checkpointScript, l.key, true, l.token, l.nonce, r.Point, state)
	var short errReplicas
	if err != nil && !errors.As(err, &short) {
		return unknown("checkpoint", err)
	}
	reply, _ := raw.([]any)
	if len(reply) == 0 || reply[0] != "ok" {
		return fmt.Errorf("idemredis: checkpoint (token %s): %w", l.token, idemstore.ErrLeaseLost)
	}
	if short.want > 0 {
		// Saved on the primary only: put the point it replaced back, so
		// that a later holder never reads a point a failover could take
		// away (idemproxy's "forwarded" must hold before anything is sent).
		var was [2]string
		for i := range was {
			if i+1 < len(reply) {
				was[i], _ = reply[i+1].(string)
			}
		}
		if err := restorePointScript.Run(context.WithoutCancel(ctx), l.store.rdb, []string{l.key}, l.token, l.nonce, was[0], was[1]).Err(); err != nil {
			return unknown("checkpoint", fmt.Errorf("%w, and restoring the point it replaced failed: %w", short, err))
		}
		return unavailable("checkpoint", short)
	}
	return nil
}
