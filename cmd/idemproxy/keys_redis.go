package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/idemkit/idem/cmd/internal/proxy"
	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
)

// redisHeld reports whether a key on Redis is held, by the rules the SQL
// queries (sqliteHeldWhere, postgresHeldWhere) state: completed with the
// proxy's outcome-unknown problem (a 502 or 504), or started with no
// holder at the recovery point proxy.RecoveryOutcomeUnknown (probe), or at
// proxy.RecoveryForwarded on a hold route.
func redisHeld(k idemredis.Key) bool {
	switch k.Status {
	case idemstore.StatusCompleted:
		r := k.Response
		return r != nil && (r.StatusCode == http.StatusBadGateway || r.StatusCode == http.StatusGatewayTimeout) &&
			(bytes.Contains(r.Body, []byte(heldMarker)) || bytes.Contains(r.Body, []byte(legacyHeldMarker)))
	case idemstore.StatusInFlight:
		return k.LockedAt.IsZero() && (k.Recovery.Point == proxy.RecoveryOutcomeUnknown ||
			k.Recovery.Point == proxy.RecoveryForwarded && k.Recovery.State["policy"] == string(proxy.PolicyHold))
	}
	return false
}

// redisKeys reads and deletes held keys in an idemredis store: a scan of
// every key on every primary, and a delete fenced by the key's token and
// nonce, so that a retry that claimed the key since it was read keeps it.
func redisKeys(store *idemredis.Store, close func()) *keySQL {
	return &keySQL{
		held: func(ctx context.Context) ([]heldKey, error) {
			var out []heldKey
			err := store.ScanKeys(ctx, "", func(k idemredis.Key) {
				if redisHeld(k) {
					out = append(out, heldKey{clientID: k.Scope.ClientID, key: k.Scope.Key, method: k.Method, path: k.Path,
						created: k.CreatedAt, status: string(k.Status), point: k.Recovery.Point})
				}
			})
			if err != nil {
				return nil, fmt.Errorf("list held keys: %w", err)
			}
			slices.SortFunc(out, func(a, b heldKey) int { return a.created.Compare(b.created) })
			return out, nil
		},
		release: func(ctx context.Context, clientID, key string) (int64, error) {
			_, err := store.DeleteKeyIf(ctx, idemstore.Scope{ClientID: clientID, Key: key}, func(k idemredis.Key) error {
				if !redisHeld(k) {
					return errNotHeld
				}
				return nil
			})
			switch {
			case err == nil:
				return 1, nil
			case errors.Is(err, errNotHeld), errors.Is(err, idemstore.ErrKeyNotFound), errors.Is(err, idemstore.ErrKeyChanged):
				return 0, nil
			}
			return 0, fmt.Errorf("release: %w", err)
		},
		close: close,
	}
}

var errNotHeld = errors.New("the key is not held")
