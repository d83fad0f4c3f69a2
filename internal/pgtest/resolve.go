package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnavailable reports that no PostgreSQL server could be found or
// started. Tests skip on it unless the CI environment variable is true.
var ErrUnavailable = errors.New("pgtest: no PostgreSQL available")

// UnavailableError says why no PostgreSQL server could be found or started.
// It unwraps to ErrUnavailable.
type UnavailableError struct {
	// Reasons lists, in the order tried, why each way to get a server failed.
	Reasons []string
}

// Error returns ErrUnavailable's message followed by the reasons, on one line.
func (e *UnavailableError) Error() string {
	return ErrUnavailable.Error() + ": " + strings.Join(e.Reasons, "; ")
}

// Unwrap returns ErrUnavailable.
func (e *UnavailableError) Unwrap() error { return ErrUnavailable }

// server is the resolved shared server.
type server struct {
	url     string
	cluster *Cluster // the throwaway cluster serving url, or nil
}

// resolver picks the shared server. Its fields are the outside world, so
// that tests can replace them.
type resolver struct {
	getenv       func(key string) string
	ping         func(ctx context.Context, connString string, timeout time.Duration) error
	startCluster func(ctx context.Context) (*Cluster, error)
}

// defaultResolver looks at the real environment, network and binaries.
func defaultResolver() resolver {
	return resolver{getenv: os.Getenv, ping: ping, startCluster: startSharedCluster}
}

// resolve tries EnvDatabaseURL, then LocalURL, then a throwaway cluster. An
// error that wraps ErrUnavailable means that nothing was there to try; any
// other error means that something was there and did not work.
func (r resolver) resolve(ctx context.Context) (server, error) {
	if connString := r.getenv(EnvDatabaseURL); connString != "" {
		if err := r.ping(ctx, connString, envPingTimeout); err != nil {
			return server{}, fmt.Errorf("pgtest: %s is set but its server does not answer within %s: %s",
				EnvDatabaseURL, envPingTimeout, oneLine(err.Error()))
		}
		return server{url: connString}, nil
	}
	localErr := r.ping(ctx, LocalURL, localPingTimeout)
	if localErr == nil {
		return server{url: LocalURL}, nil
	}
	c, err := r.startCluster(ctx)
	if err != nil {
		var ue *UnavailableError
		if errors.As(err, &ue) {
			reasons := []string{
				EnvDatabaseURL + " is not set",
				"nothing answers on 127.0.0.1:5432 (" + oneLine(localErr.Error()) + ")",
			}
			return server{}, &UnavailableError{Reasons: append(reasons, ue.Reasons...)}
		}
		return server{}, err
	}
	return server{url: c.URL("postgres"), cluster: c}, nil
}

// verdict decides what a test does about err from resolving or starting a
// server: skip with msg, or fail with msg. Only ErrUnavailable skips, and
// only when the CI environment variable is not true.
func verdict(err error, getenv func(key string) string) (skip bool, msg string) {
	msg = err.Error()
	if !errors.Is(err, ErrUnavailable) {
		return false, msg
	}
	if isCI(getenv) {
		return false, msg + " (" + EnvCI + " is true, so tests that need PostgreSQL fail instead of skipping)"
	}
	return true, msg
}

// isCI reports whether the CI environment variable holds a true value
// ("true", "1", ... as strconv.ParseBool reads it).
func isCI(getenv func(key string) string) bool {
	v, err := strconv.ParseBool(strings.TrimSpace(getenv(EnvCI)))
	return err == nil && v
}

// ping connects to connString within timeout and disconnects.
func ping(ctx context.Context, connString string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, connString)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// startSharedCluster starts the throwaway cluster that serves as the shared
// server when nothing else answers.
func startSharedCluster(ctx context.Context) (*Cluster, error) {
	spec, err := locate()
	if err != nil {
		return nil, err
	}
	if !mainActive.Load() {
		return nil, errors.New("pgtest: no PostgreSQL answers, and starting a throwaway one needs TestMain to call pgtest.Main(m), which stops it when the tests end")
	}
	return spec.create(ctx)
}

// oneLine joins the lines of s with spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
