//go:build !linux

package pgcluster

import (
	"context"
	"runtime"
)

// Cluster is a throwaway PostgreSQL cluster. Running one needs Linux; on
// this system New returns an *UnavailableError and no Cluster ever exists.
type Cluster struct{}

// New returns an *UnavailableError: clusters need Linux.
func New(context.Context) (*Cluster, error) { return nil, errNoCluster() }

// Available returns an *UnavailableError: clusters need Linux.
func Available() error { return errNoCluster() }

func (c *Cluster) URL(database string) string                             { return "" }
func (c *Cluster) Port() int                                              { return 0 }
func (c *Cluster) Dir() string                                            { return "" }
func (c *Cluster) PID() int                                               { return 0 }
func (c *Cluster) Stop() error                                            { return errNoCluster() }
func (c *Cluster) Crash() error                                           { return errNoCluster() }
func (c *Cluster) Start(context.Context) error                            { return errNoCluster() }
func (c *Cluster) Restart(context.Context) error                          { return errNoCluster() }
func (c *Cluster) Close() error                                           { return nil }
func (c *Cluster) CreateDatabase(context.Context, string) (string, error) { return "", errNoCluster() }

func errNoCluster() error {
	return &UnavailableError{Reasons: []string{"a throwaway cluster needs Linux, and this is " + runtime.GOOS}}
}

func (c *Cluster) NewStandby(context.Context, string) (*Cluster, error) { return nil, errNoCluster() }
func (c *Cluster) Promote(context.Context) error                        { return errNoCluster() }
func (c *Cluster) SetSynchronous(context.Context, bool) error           { return errNoCluster() }
func (c *Cluster) WaitStandby(context.Context, bool) error              { return errNoCluster() }
func (c *Cluster) LimitWAL(context.Context, int64) error                { return errNoCluster() }
func (c *Cluster) FillWAL() error                                       { return errNoCluster() }
func (c *Cluster) FreeWAL() error                                       { return nil }
func (c *Cluster) Running() bool                                        { return false }
