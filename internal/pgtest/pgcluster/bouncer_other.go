//go:build !linux

package pgcluster

import "context"

// Bouncer is a PgBouncer process; starting one needs Linux.
type Bouncer struct{}

// StartBouncer returns an *UnavailableError: it needs Linux.
func StartBouncer(context.Context, string) (*Bouncer, string, error) {
	return nil, "", errNoCluster()
}

// Close does nothing.
func (b *Bouncer) Close() error { return nil }
