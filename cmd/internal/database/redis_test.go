package database

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestOpenRedisOnlyWhenAsked: a Redis URL opens only with Config.Redis
// (idemproxy's), and its own options are checked without repeating the
// URL, which may hold a password.
func TestOpenRedisOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, url := range []string{"redis://:hunter2@127.0.0.1:1/0", "redis-cluster://:hunter2@127.0.0.1:1,127.0.0.1:2"} {
		if _, err := Open(ctx, url, nil); !errors.Is(err, ErrUnsupported) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%s) without Config.Redis = %v, want ErrUnsupported without the URL", url, err)
		}
	}
	for _, url := range []string{
		"redis://:hunter2@127.0.0.1:1/0?min_replicas=x",
		"redis://:hunter2@127.0.0.1:1/0?replica_timeout=1",
		"redis://:hunter2@127.0.0.1:1/0?prefix=a:b",
		"redis-cluster://:hunter2@127.0.0.1:1/3",
		"redis://:hunter2@127.0.0.1:1/0?no_such_option=1",
	} {
		if _, err := Open(ctx, url, &Config{Redis: true}); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%s) = %v, want an error without the password", url, err)
		}
	}
}
