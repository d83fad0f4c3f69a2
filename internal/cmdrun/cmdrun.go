// Package cmdrun holds what the project's binaries share: a main function
// that turns SIGINT and SIGTERM into a cancelled context, graceful serving,
// and flag defaults read from environment variables.
package cmdrun

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RunFunc is a binary's testable body.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main is the whole main function of a service binary: it calls run with
// the process's arguments and a context that SIGINT or SIGTERM cancels, and
// exits with the status ExitCode gives a failure (after printing the error,
// unless it was a request for -h).
func Main(name string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		}
		os.Exit(ExitCode(err))
	}
}

// UsageError is an error in how a binary was called: its flags, arguments
// or their values. Main exits with status 2 for it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usage wraps err, unless nil, as a UsageError.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{err}
}

// ExitCode is the exit status of a binary whose run returned err: 0 for
// nil, 2 for a usage error or -h, 1 for any other failure (a refusal, a
// store that failed), so that scripts can tell a mistyped call from a
// refusal.
func ExitCode(err error) int {
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp), errors.As(err, &usage):
		return 2
	}
	return 1
}

// Serve serves srv on ln until ctx is done, then shuts it down gracefully:
// the listener closes and requests in flight have up to timeout to finish.
// It returns the server's error if serving fails before that.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, timeout time.Duration) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// Env reads flag defaults from environment variables, the twins of the
// flags, and keeps the first value it could not parse: a bad value is an
// error, never silently the default.
type Env struct {
	lookup func(string) (string, bool)
	err    error
}

// NewEnv returns an Env reading through lookup, such as os.LookupEnv.
func NewEnv(lookup func(string) (string, bool)) *Env { return &Env{lookup: lookup} }

// Err is the first value that did not parse, or nil.
func (e *Env) Err() error { return e.err }

// Lookup returns a variable's raw value.
func (e *Env) Lookup(name string) (string, bool) { return e.lookup(name) }

// String returns the variable's value, or def when it is unset.
func (e *Env) String(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

// Int returns the variable as an integer, or def.
func (e *Env) Int(name string, def int) int {
	return parse(e, name, def, "an integer", strconv.Atoi)
}

// Float returns the variable as a number, or def.
func (e *Env) Float(name string, def float64) float64 {
	return parse(e, name, def, "a number", func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
}

// Duration returns the variable as a duration such as 10s, or def.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	return parse(e, name, def, "a duration such as 10s", time.ParseDuration)
}

// Bool returns the variable as true or false, or def.
func (e *Env) Bool(name string, def bool) bool {
	return parse(e, name, def, "true or false", strconv.ParseBool)
}

func parse[T any](e *Env, name string, def T, want string, conv func(string) (T, error)) T {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	out, err := conv(strings.TrimSpace(v))
	if err != nil {
		e.Fail(name, v, want)
		return def
	}
	return out
}

// Fail records that the variable name does not hold what it should; value
// may be empty to keep it out of the message.
func (e *Env) Fail(name, value, want string) {
	if e.err != nil {
		return
	}
	if value == "" {
		e.err = fmt.Errorf("environment variable %s: %s", name, want)
	} else {
		e.err = fmt.Errorf("environment variable %s=%q: want %s", name, value, want)
	}
}

// Redacted is a flag.Value for a string that may be a URL with a password,
// such as a database URL: its String, which `-h` prints as the default,
// shows the password as "xxxxx".
type Redacted string

// Set sets the value.
func (r *Redacted) Set(v string) error { *r = Redacted(v); return nil }

// String returns the value with any URL password replaced by "xxxxx".
func (r *Redacted) String() string {
	if r == nil {
		return ""
	}
	u, err := url.Parse(string(*r))
	if err != nil || u.User == nil {
		if err != nil && strings.Contains(string(*r), "@") {
			return "(hidden)"
		}
		return string(*r)
	}
	return u.Redacted()
}
