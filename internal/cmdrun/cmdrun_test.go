package cmdrun

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestEnv(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"S": "text", "N": " 42 ", "D": "1m", "B": "true", "F": "0.25", "BAD": "soon"}
	e := NewEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if e.String("S", "x") != "text" || e.String("UNSET", "x") != "x" || e.Int("N", 0) != 42 ||
		e.Duration("D", 0) != time.Minute || !e.Bool("B", false) || e.Float("F", 0) != 0.25 {
		t.Fatal("a set or unset variable read wrong")
	}
	if e.Err() != nil {
		t.Fatalf("Err() = %v before any bad value", e.Err())
	}
	if got := e.Duration("BAD", time.Second); got != time.Second {
		t.Errorf("bad duration gave %v, want the default", got)
	}
	e.Int("S", 0) // a second bad value does not replace the first error
	if err := e.Err(); err == nil || !strings.Contains(err.Error(), `BAD="soon": want a duration`) {
		t.Errorf("Err() = %v, want the first bad value named", err)
	}
}

func TestServeShutsDownWhenCancelled(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inside)
		<-release
		io.WriteString(w, "finished")
	})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, ln, 10*time.Second) }()
	answer := make(chan string, 1)
	go func() {
		res, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			answer <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		answer <- string(b)
	}()
	<-inside
	cancel() // shutdown begins while the request is in flight
	close(release)
	if got := <-answer; got != "finished" {
		t.Errorf("in-flight request got %q, want it to finish", got)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve = %v, want nil after a graceful shutdown", err)
	}
}

func TestRedactedHidesPasswords(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:s3cret@127.0.0.1:5432/db": "postgres://u:xxxxx@127.0.0.1:5432/db",
		"postgres://u@127.0.0.1/db":             "postgres://u@127.0.0.1/db",
		"sqlite:paymentsd.db":                   "sqlite:paymentsd.db",
		"postgres://u:%zz@h/db":                 "(hidden)",
		"":                                      "",
	} {
		r := Redacted(in)
		if got := r.String(); got != want || strings.Contains(got, "s3cret") {
			t.Errorf("Redacted(%q).String() = %q, want %q", in, got, want)
		}
	}
}
