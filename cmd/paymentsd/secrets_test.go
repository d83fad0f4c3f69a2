package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRunNeverPrintsTokens: the start-up warning about the development
// tokens names the clients, and a bad -tokens value is named by position:
// neither prints a token or a value given as one.
func TestRunNeverPrintsTokens(t *testing.T) {
	t.Parallel()
	t.Run("DevelopmentTokens", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stdout, stderr := newLineWriter(), &syncBuffer{}
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, []string{"-addr", "127.0.0.1:0", "-admin-addr", "off", "-tokens", "",
				"-processor", "http://127.0.0.1:1", "-db", "sqlite:" + filepath.Join(t.TempDir(), "p.db")}, stdout, stderr)
		}()
		waitListening(t, stdout.lines, "paymentsd")
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		out := stderr.String()
		if !strings.Contains(out, "development tokens") || !strings.Contains(out, "alice,bob") || !strings.Contains(out, "processor token") {
			t.Errorf("stderr lacks the warnings:\n%s", out)
		}
		if strings.Contains(out, "sk_") {
			t.Errorf("stderr prints a token:\n%s", out)
		}
	})
	for _, tt := range []struct{ tokens, want string }{
		{"sk_live_SECRETVALUE", "token pair 1 of 1"},
		{"sk_a=alice,sk_live_SECRETVALUE", "token pair 2 of 2"},
		{"sk_a=alice,sk_live_SECRET\u00a0VALUE=bob", "token pair 2 of 2"},
	} {
		var stderr bytes.Buffer
		err := Run(context.Background(), []string{"-tokens", tt.tokens, "-admin-addr", "off", "-addr", "127.0.0.1:0"}, &stderr, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error()+stderr.String(), "SECRET") {
			t.Errorf("-tokens %q: %v (output %q), want an error naming %q without the value", tt.tokens, err, stderr.String(), tt.want)
		}
	}
}

// TestAdminListenerCanBeTurnedOff: with -admin-addr off nothing listens
// for /metrics, and the public listener never serves it.
func TestAdminListenerCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := newLineWriter()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"-addr", "127.0.0.1:0", "-admin-addr", "off", "-tokens", "sk_a=alice",
			"-db", "sqlite:" + filepath.Join(t.TempDir(), "p.db")}, stdout, &syncBuffer{})
	}()
	base := waitListening(t, stdout.lines, "paymentsd")
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics on the public listener: %d, want 404", res.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of cancel")
	}
	for len(stdout.lines) > 0 {
		if line := <-stdout.lines; adminRE.MatchString(line) {
			t.Errorf("an admin endpoint started: %s", line)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHelpNeverPrintsTokens: -h shows defaults, and a token set in the
// environment is no default to show.
func TestHelpNeverPrintsTokens(t *testing.T) {
	t.Setenv("PAYMENTSD_TOKENS", "sk_live_SECRETVALUE=alice")
	t.Setenv("PAYMENTSD_PROCESSOR_TOKEN", "sk_live_SECRETPROCESSOR")
	var out bytes.Buffer
	Run(context.Background(), []string{"-h"}, &out, &out)
	if !strings.Contains(out.String(), "-tokens") || strings.Contains(out.String(), "SECRETVALUE") || strings.Contains(out.String(), "SECRETPROCESSOR") {
		t.Errorf("-h output:\n%s", out.String())
	}
	o, err := parseFlags(nil, &out)
	if err != nil || o.tokens != "sk_live_SECRETVALUE=alice" || o.processorToken != "sk_live_SECRETPROCESSOR" {
		t.Errorf("the environment's tokens are not used: %+v, %v", o, err)
	}
}
