package idemredis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/redis/go-redis/v9"
)

var prefixSeq atomic.Int64

// harness returns the conformance harness of stores on rdb, each under a
// prefix of its own.
func harness(rdb redis.UniversalClient, cfg idemredis.Config) idemtest.Harness {
	return idemtest.Harness{
		TwoPhaseOnly: true,
		NewStore: func(t *testing.T) idemstore.Store {
			c := cfg
			c.Prefix = fmt.Sprintf("t%d", prefixSeq.Add(1))
			s, err := idemredis.New(rdb, &c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s
		},
	}
}

func TestStore(t *testing.T) {
	rdb := singleServer(t)
	h := harness(rdb, idemredis.Config{})
	t.Run("Store", func(t *testing.T) { idemtest.RunStoreTests(t, h) })
	t.Run("Admin", func(t *testing.T) { idemtest.RunAdminTests(t, h) })
}

func TestStoreCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a six-node cluster")
	}
	rdb, _ := cluster(t)
	h := harness(rdb, idemredis.Config{MinReplicas: 1})
	t.Run("Store", func(t *testing.T) { idemtest.RunStoreTests(t, h) })
	t.Run("Admin", func(t *testing.T) { idemtest.RunAdminTests(t, h) })
}

func TestReady(t *testing.T) {
	rdb := singleServer(t)
	s, err := idemredis.New(rdb, &idemredis.Config{Prefix: "ready"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var sv *idemstore.SchemaVersionError
	if err := s.Ready(ctx); !errorsAs(err, &sv) || sv.Have != 0 {
		t.Fatalf("Ready before Migrate = %v; want a SchemaVersionError at 0", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready after Migrate = %v", err)
	}
}
