package reqlog_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/internal/reqlog"
)

func TestInfo(t *testing.T) {
	t.Parallel()
	if _, ok := reqlog.FromContext(context.Background()); ok {
		t.Fatal("FromContext found an Info in a context without one")
	}
	info := &reqlog.Info{ID: "req-1"}
	got, ok := reqlog.FromContext(reqlog.NewContext(context.Background(), info))
	if !ok || got != info {
		t.Fatalf("FromContext = %p, %v; want %p", got, ok, info)
	}
	info.SetClient("auth")
	info.SetScope("alice", "54c46bd689b2")
	info.SetScope("alice", "") // the key-status handler without a key keeps the digest
	info.SetResult("executed")
	if client, digest, result := info.Notes(); client != "alice" || digest != "54c46bd689b2" || result != "executed" {
		t.Errorf("Notes() = %q, %q, %q; want alice, 54c46bd689b2, executed", client, digest, result)
	}
}
