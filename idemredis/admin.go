package idemredis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem/idemstore"
	"github.com/redis/go-redis/v9"
)

// GetKey implements [idemstore.KeyReader].
func (s *Store) GetKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	rec, _, err := s.read(ctx, s.keyName(scope), true)
	if err != nil {
		return nil, fmt.Errorf("idemredis: get key: %w", err)
	}
	return rec, nil
}

// read reads the record of the hash key, with the nonce of its holder.
func (s *Store) read(ctx context.Context, key string, body bool) (*idemstore.Record, string, error) {
	fields := append(recordFields[:len(recordFields)-1:len(recordFields)-1], "n")
	if body {
		fields = append(fields, "bd")
	}
	v, err := s.rdb.HMGet(ctx, key, fields...).Result()
	if err != nil {
		return nil, "", unavailable("read key", err)
	}
	if v[6] == nil {
		return nil, "", idemstore.ErrKeyNotFound
	}
	nonce, _ := v[len(recordFields)-1].(string)
	v = slices.Delete(v, len(recordFields)-1, len(recordFields))
	rec, err := decodeRecord(v)
	return rec, nonce, err
}

// scan calls fn with the records of the keys that match pattern, read by
// a pipeline per SCAN batch, on every primary of a cluster. It reads
// every key of the prefix that matches: its cost grows with the keys
// kept, not with those it returns.
func (s *Store) scan(ctx context.Context, pattern string, body bool, fn func(rec *idemstore.Record, point, state string)) error {
	fields := slices.Clone(recordFields[:len(recordFields)-1])
	fields = append(fields, "rp", "rs")
	if body {
		fields = append(fields, "bd")
	}
	one := func(ctx context.Context, node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, pattern, 500).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			cmds, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range batch {
					p.HMGet(ctx, k, fields...)
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, c := range cmds {
				v := c.(*redis.SliceCmd).Val()
				if v[6] == nil {
					continue // gone since the SCAN
				}
				point, _ := v[len(recordFields)-1].(string)
				state, _ := v[len(recordFields)].(string)
				v = slices.Delete(v, len(recordFields)-1, len(recordFields)+1)
				if !body {
					v = append(v, "")
				}
				rec, err := decodeRecord(v)
				if err != nil {
					return err
				}
				fn(rec, point, state)
			}
			batch = batch[:0]
			return nil
		}
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == 500 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		return flush()
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		// fn is called from one goroutine per primary.
		var mu chanMutex = make(chan struct{}, 1)
		inner := fn
		fn = func(rec *idemstore.Record, point, state string) { mu <- struct{}{}; inner(rec, point, state); <-mu }
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return one(ctx, node) })
	} else {
		err = one(ctx, s.rdb)
	}
	if err != nil {
		return unavailable("scan keys", err)
	}
	return nil
}

type chanMutex chan struct{}

// ListKeys implements [idemstore.KeyAdmin]. It scans every key of the
// store's prefix (of p.ClientID's keys only when set) on every primary.
func (s *Store) ListKeys(ctx context.Context, p idemstore.ListKeysParams) ([]*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idemredis: list keys: %w", err)
	}
	p = p.WithDefaults()
	var out []*idemstore.Record
	err := s.scan(ctx, s.match(p.ClientID), p.WithBody, func(rec *idemstore.Record, _, _ string) {
		if (p.Status == "" || rec.Status == p.Status) && (p.CreatedBefore.IsZero() || rec.CreatedAt.Before(p.CreatedBefore)) {
			out = append(out, rec)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("idemredis: list keys: %w", err)
	}
	slices.SortFunc(out, func(a, b *idemstore.Record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Scope.ClientID, b.Scope.ClientID), cmp.Compare(a.Scope.Key, b.Scope.Key))
	})
	if len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// Unfinished implements [idemstore.RecoveryStore]: it scans every key of
// the prefix, on every primary, and keeps those that
// idemstore.UnfinishedParams.Lists. Redis has no index on the key's state
// or age: a pass costs a read of every key kept.
func (s *Store) Unfinished(ctx context.Context, p idemstore.UnfinishedParams) ([]*idemstore.Record, error) {
	if p.Limit <= 0 {
		return nil, nil // a limit of 0 (or less) lists none
	}
	var out []*idemstore.Record
	err := s.scan(ctx, s.match(""), false, func(rec *idemstore.Record, point, _ string) {
		if p.Lists(rec, point) {
			rec.Response = nil
			out = append(out, rec)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("idemredis: list unfinished keys: %w", err)
	}
	slices.SortFunc(out, func(a, b *idemstore.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	if len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// ReleaseKey implements [idemstore.KeyAdmin]. It reads the key, asks
// idemstore.ReleaseKeyParams.Check, and ends the lease only if the key's
// token and nonce are still those it read (else [idemstore.ErrKeyChanged]).
func (s *Store) ReleaseKey(ctx context.Context, p idemstore.ReleaseKeyParams) (*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idemredis: release key: %w", err)
	}
	key := s.keyName(p.Scope)
	rec, nonce, err := s.read(ctx, key, false)
	if err != nil {
		return nil, fmt.Errorf("idemredis: release key: %w", err)
	}
	if err := p.Check(rec); err != nil {
		return nil, fmt.Errorf("idemredis: release key: %w", err)
	}
	next, err := newNonce()
	if err != nil {
		return nil, fmt.Errorf("idemredis: release key: %w", err)
	}
	res, err := adminReleaseScript.Run(ctx, s.rdb, []string{key}, strconv.FormatInt(rec.Token, 10), nonce, next).Text()
	if err != nil {
		return nil, unknown("release key", err)
	}
	if res != "ok" {
		return nil, fmt.Errorf("idemredis: release key: %w", idemstore.ErrKeyChanged)
	}
	return rec, nil
}

// DeleteKey implements [idemstore.KeyAdmin]: it reads the key, asks
// idemstore.CheckDelete, and deletes it only if its token and nonce are
// still those it read.
func (s *Store) DeleteKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	key := s.keyName(scope)
	rec, nonce, err := s.read(ctx, key, false)
	if err != nil {
		return nil, fmt.Errorf("idemredis: delete key: %w", err)
	}
	if err := idemstore.CheckDelete(rec); err != nil {
		return nil, fmt.Errorf("idemredis: delete key: %w", err)
	}
	res, err := deleteScript.Run(ctx, s.rdb, []string{key}, strconv.FormatInt(rec.Token, 10), nonce).Text()
	if err != nil {
		return nil, unknown("delete key", err)
	}
	if res != "ok" {
		return nil, fmt.Errorf("idemredis: delete key: %w", idemstore.ErrKeyChanged)
	}
	if rec.Response != nil {
		rec.Response.Body = nil
	}
	return rec, nil
}

// Migrate records [LayoutVersion] in the key "PREFIX:schema", unless a
// newer build recorded a higher one. There is nothing else to create:
// keys are made by claims.
func (s *Store) Migrate(ctx context.Context) error {
	have, err := s.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("idemredis: migrate: %w", err)
	}
	if have >= LayoutVersion {
		return nil
	}
	if err := s.rdb.Set(ctx, s.schemaKey(), LayoutVersion, 0).Err(); err != nil {
		return unavailable("migrate", err)
	}
	return nil
}

// SchemaVersion returns the layout version recorded by [Store.Migrate],
// 0 for none.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	v, err := s.rdb.Get(ctx, s.schemaKey()).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, unavailable("read schema version", err)
	}
	return v, nil
}

// Ready implements [idemstore.Readier]: every primary answers PING and,
// with [Config.MinReplicas] set, has that many replicas online (else
// every claim would fail its WAIT), and the schema marker is at
// [LayoutVersion] (see [Store.Migrate]).
func (s *Store) Ready(ctx context.Context) error {
	check := func(ctx context.Context, c redis.Cmdable) error {
		if s.cfg.MinReplicas == 0 {
			return c.Ping(ctx).Err()
		}
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if n := strings.Count(info, ",state=online,"); n < s.cfg.MinReplicas {
			return fmt.Errorf("a primary has %d replicas online, and MinReplicas is %d", n, s.cfg.MinReplicas)
		}
		return nil
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	} else {
		err = check(ctx, s.rdb)
	}
	if err != nil {
		return unavailable("ready", err)
	}
	have, err := s.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("idemredis: ready: %w", err)
	}
	if have != LayoutVersion {
		return fmt.Errorf("idemredis: ready: %w", &idemstore.SchemaVersionError{Have: have, Want: LayoutVersion})
	}
	return nil
}
