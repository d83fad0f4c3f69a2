package proxy

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/cmd/internal/redistest"
	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
)

// Every test that runs on each of storeKinds runs on Redis too: a server
// of the test's own.
func init() { storeKinds = append(storeKinds, "redis") }

// newRedisStore returns a migrated idemredis store on a redis-server of
// the test's own.
func newRedisStore(t *testing.T) idemstore.Store {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	s, err := idemredis.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
