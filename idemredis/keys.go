package idemredis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/idemkit/idem/idemstore"
)

// Key is a key as an operator's tool reads it: its record, with the
// response body, and its recovery point.
type Key struct {
	*idemstore.Record
	// Recovery is the key's recovery point and state; Point is
	// idemstore.RecoveryStarted for a key that passed none.
	Recovery idemstore.Recovery
}

// ScanKeys calls fn with every key of the store's prefix (of client's
// only, when client is not ""), on every primary, in no order, one call
// at a time. Like [Store.ListKeys] it reads every key kept. It is for
// tools that select keys by what the records and recovery points hold,
// such as idemproxy's held keys.
func (s *Store) ScanKeys(ctx context.Context, client string, fn func(Key)) error {
	var bad error
	err := s.scan(ctx, s.match(client), true, func(rec *idemstore.Record, point, state string) {
		k, err := keyOf(rec, point, state)
		if err != nil {
			bad = err
			return
		}
		fn(k)
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return fmt.Errorf("idemredis: scan keys: %w", err)
	}
	return nil
}

func keyOf(rec *idemstore.Record, point, state string) (Key, error) {
	k := Key{Record: rec, Recovery: idemstore.Recovery{Point: point}}
	if point == "" {
		k.Recovery.Point = idemstore.RecoveryStarted
	}
	if state != "" {
		if err := json.Unmarshal([]byte(state), &k.Recovery.State); err != nil {
			return Key{}, fmt.Errorf("decode the recovery state of key %q of %q: %w", rec.Scope.Key, rec.Scope.ClientID, err)
		}
	}
	return k, nil
}

// DeleteKeyIf deletes the key of scope if check, given the key as read,
// returns nil, and only if the key's state, fencing token and holder's
// nonce are still those read (else an error wrapping
// idemstore.ErrKeyChanged): a claim, takeover or completion in between
// keeps it. It returns the key as read, or an error wrapping
// idemstore.ErrKeyNotFound, or check's error, wrapped. Unlike
// [Store.DeleteKey] it deletes a started key too: the check decides.
func (s *Store) DeleteKeyIf(ctx context.Context, scope idemstore.Scope, check func(Key) error) (Key, error) {
	key := s.keyName(scope)
	fields := append(recordFields[:len(recordFields):len(recordFields)], "n", "rp", "rs")
	v, err := s.rdb.HMGet(ctx, key, fields...).Result()
	if err != nil {
		return Key{}, unavailable("delete key", err)
	}
	if v[6] == nil {
		return Key{}, fmt.Errorf("idemredis: delete key: %w", idemstore.ErrKeyNotFound)
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	n := len(recordFields)
	nonce, point, state := str(n), str(n+1), str(n+2)
	rec, err := decodeRecord(v[:n])
	if err != nil {
		return Key{}, fmt.Errorf("idemredis: delete key: %w", err)
	}
	k, err := keyOf(rec, point, state)
	if err != nil {
		return Key{}, fmt.Errorf("idemredis: delete key: %w", err)
	}
	if err := check(k); err != nil {
		return k, fmt.Errorf("idemredis: delete key: %w", err)
	}
	res, err := deleteIfScript.Run(ctx, s.rdb, []string{key}, strconv.FormatInt(rec.Token, 10), nonce, string(rec.Status)).Text()
	if err != nil {
		return k, unknown("delete key", err)
	}
	if res != "ok" {
		return k, fmt.Errorf("idemredis: delete key: %w", idemstore.ErrKeyChanged)
	}
	return k, nil
}
