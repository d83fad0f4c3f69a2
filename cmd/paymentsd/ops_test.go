package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadyzNeedsTheSchema starts paymentsd without migrations on an empty
// database: /healthz is 200 (the process lives), /readyz 503 naming the
// schema version; both are in the OpenAPI document.
func TestReadyzNeedsTheSchema(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	p := runInProcess(t, "-addr", "127.0.0.1:0", "-admin-addr", "off", "-db", db, "-tokens", "sk_a=alice", "-migrate=false", "-log-format", "json")
	stdout := p.stdout
	base := waitListening(t, stdout.lines, "paymentsd")
	get := func(path string) (int, string) {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s, want 200", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "schema is at version 0") {
		t.Errorf("/readyz without migrations: %d %s, want 503 naming the schema version", code, body)
	}
	_, doc := get("/openapi.json")
	var openapi struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(doc), &openapi); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/readyz", "/v1/idempotency-keys/{key}"} {
		if openapi.Paths[path] == nil {
			t.Errorf("the OpenAPI document lacks %s", path)
		}
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}

func TestRunRejectsBadLogFormat(t *testing.T) {
	t.Parallel()
	err := Run(context.Background(), []string{"-log-format", "xml", "-db", "sqlite:" + filepath.Join(t.TempDir(), "p.db")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-log-format") {
		t.Fatalf("Run with -log-format xml = %v, want an error naming the flag", err)
	}
}
