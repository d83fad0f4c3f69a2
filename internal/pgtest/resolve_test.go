package pgtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest/pgcluster"
)

// fakeWorld answers a resolver from fixed data and records what it was asked.
type fakeWorld struct {
	env        map[string]string
	answering  map[string]bool // connection strings whose server answers
	clusterErr error           // returned by startCluster; nil starts fakeCluster
	pinged     []string
	started    bool
}

var fakeCluster = &Cluster{c: &pgcluster.Cluster{}}

func (w *fakeWorld) resolver() resolver {
	return resolver{
		getenv: func(key string) string { return w.env[key] },
		ping: func(_ context.Context, connString string, _ time.Duration) error {
			w.pinged = append(w.pinged, connString)
			if w.answering[connString] {
				return nil
			}
			return errors.New("dial tcp: connect: connection refused\n(simulated)")
		},
		startCluster: func(context.Context) (*Cluster, error) {
			w.started = true
			if w.clusterErr != nil {
				return nil, w.clusterErr
			}
			return fakeCluster, nil
		},
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	const envURL = "postgres://ci@db.internal:5432/ci"
	noBinaries := &UnavailableError{Reasons: []string{"no PostgreSQL server binaries"}}
	tests := []struct {
		name        string
		world       fakeWorld
		wantURL     string
		wantCluster bool
		wantErr     string // substring; "" means success
		unavailable bool   // the error wraps ErrUnavailable
		wantStarted bool
	}{
		{
			name:    "UsesEnvURLWhenItAnswers",
			world:   fakeWorld{env: map[string]string{EnvDatabaseURL: envURL}, answering: map[string]bool{envURL: true, LocalURL: true}},
			wantURL: envURL,
		},
		{
			name:    "FailsWhenEnvURLIsSilentEvenIfLocalAnswers",
			world:   fakeWorld{env: map[string]string{EnvDatabaseURL: envURL}, answering: map[string]bool{LocalURL: true}},
			wantErr: EnvDatabaseURL + " is set but its server does not answer",
		},
		{
			name:    "FailsWhenEnvURLIsSilentEvenInCI",
			world:   fakeWorld{env: map[string]string{EnvDatabaseURL: envURL, EnvCI: "true"}},
			wantErr: "does not answer",
		},
		{
			name:    "UsesLocalServerWhenEnvURLUnset",
			world:   fakeWorld{answering: map[string]bool{LocalURL: true}},
			wantURL: LocalURL,
		},
		{
			name:        "StartsClusterWhenNothingAnswers",
			world:       fakeWorld{},
			wantURL:     fakeCluster.URL("postgres"),
			wantCluster: true,
			wantStarted: true,
		},
		{
			name:        "UnavailableWithoutBinaries",
			world:       fakeWorld{clusterErr: noBinaries},
			wantErr:     "TEST_DATABASE_URL is not set; nothing answers on 127.0.0.1:5432 (dial tcp: connect: connection refused (simulated)); no PostgreSQL server binaries",
			unavailable: true,
			wantStarted: true,
		},
		{
			name:        "ClusterFailureIsNotUnavailable",
			world:       fakeWorld{clusterErr: errors.New("pgtest: initdb: exit status 1")},
			wantErr:     "initdb",
			wantStarted: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := tt.world
			srv, err := w.resolver().resolve(context.Background())
			if w.started != tt.wantStarted {
				t.Errorf("cluster started = %v, want %v", w.started, tt.wantStarted)
			}
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("resolve = %q, want an error containing %q", srv.url, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not contain %q", err, tt.wantErr)
				}
				if errors.Is(err, ErrUnavailable) != tt.unavailable {
					t.Errorf("errors.Is(err, ErrUnavailable) = %v, want %v", !tt.unavailable, tt.unavailable)
				}
				if tt.unavailable && strings.Contains(err.Error(), "\n") {
					t.Errorf("unavailable reason spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("resolve: %v", err)
			}
			if srv.url != tt.wantURL {
				t.Errorf("url = %q, want %q", srv.url, tt.wantURL)
			}
			if (srv.cluster != nil) != tt.wantCluster {
				t.Errorf("cluster = %v, want one: %v", srv.cluster, tt.wantCluster)
			}
		})
	}
}

func TestResolveDoesNotLeakEnvURL(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-password"
	w := fakeWorld{env: map[string]string{EnvDatabaseURL: "postgres://u:" + secret + "@db:5432/x"}}
	_, err := w.resolver().resolve(context.Background())
	if err == nil {
		t.Fatal("resolve succeeded against a silent server")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error shows the password: %q", err)
	}
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	unavailable := &UnavailableError{Reasons: []string{"no PostgreSQL server binaries"}}
	broken := errors.New("pgtest: initdb: exit status 1")
	tests := []struct {
		name     string
		err      error
		ci       string
		wantSkip bool
		wantMsg  string
	}{
		{name: "SkipsWhenUnavailableOutsideCI", err: unavailable, wantSkip: true, wantMsg: "no PostgreSQL server binaries"},
		{name: "SkipsWhenCIIsFalse", err: unavailable, ci: "false", wantSkip: true, wantMsg: "no PostgreSQL available"},
		{name: "SkipsWhenCIIsNotABoolean", err: unavailable, ci: "github", wantSkip: true, wantMsg: "no PostgreSQL available"},
		{name: "FailsWhenUnavailableInCI", err: unavailable, ci: "true", wantMsg: "CI is true"},
		{name: "FailsWhenCIIsOne", err: unavailable, ci: "1", wantMsg: "no PostgreSQL server binaries"},
		{name: "FailsWhenWrappedUnavailableInCI", err: errors.Join(errors.New("context"), unavailable), ci: "TRUE", wantMsg: "CI is true"},
		{name: "FailsOnBrokenServerOutsideCI", err: broken, wantMsg: "initdb"},
		{name: "FailsOnBrokenServerInCI", err: broken, ci: "true", wantMsg: "initdb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(key string) string {
				if key == EnvCI {
					return tt.ci
				}
				return ""
			}
			skip, msg := verdict(tt.err, getenv)
			if skip != tt.wantSkip {
				t.Errorf("skip = %v, want %v", skip, tt.wantSkip)
			}
			if !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", msg, tt.wantMsg)
			}
		})
	}
}
