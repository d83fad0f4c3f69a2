//go:build !linux

package pgtest

import (
	"context"
	"runtime"
	"testing"
)

// Cluster is a throwaway PostgreSQL cluster. Starting one needs Linux (the
// server runs as a child that dies with the test binary, under the postgres
// user when the tests run as root); on this system StartCluster skips the
// test, or fails it when CI is true, and no Cluster ever exists.
type Cluster struct{}

// StartCluster would start a throwaway cluster. On this system it skips the
// test, or fails it when the CI environment variable is true: point
// EnvDatabaseURL at a server and use NewDatabase instead.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	fail(t, errNoCluster())
	return nil
}

// URL returns "": no cluster exists on this system.
func (c *Cluster) URL(database string) string { return "" }

// Port returns 0: no cluster exists on this system.
func (c *Cluster) Port() int { return 0 }

// Stop fails the test: no cluster exists on this system.
func (c *Cluster) Stop(t testing.TB) { t.Helper(); t.Fatal(errNoCluster()) }

// Start fails the test: no cluster exists on this system.
func (c *Cluster) Start(t testing.TB) { t.Helper(); t.Fatal(errNoCluster()) }

// Restart fails the test: no cluster exists on this system.
func (c *Cluster) Restart(t testing.TB) { t.Helper(); t.Fatal(errNoCluster()) }

// CreateDatabase fails the test: no cluster exists on this system.
func (c *Cluster) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	t.Fatal(errNoCluster())
	return ""
}

// clusterSpec is empty: nothing can create a cluster here.
type clusterSpec struct{}

// locate answers that no cluster can be started on this system.
func locate() (clusterSpec, error) { return clusterSpec{}, errNoCluster() }

func (clusterSpec) create(context.Context) (*Cluster, error) { return nil, errNoCluster() }

func (c *Cluster) close() error { return nil }

func liveClusters() []*Cluster { return nil }

func errNoCluster() error {
	return &UnavailableError{Reasons: []string{"a throwaway cluster needs Linux, and this is " + runtime.GOOS + ": set " + EnvDatabaseURL}}
}
