package database

import "github.com/idemkit/idem/idemoutbox"

// Outbox returns the store's outbox: events enqueued in a request's
// transaction, delivered by an idemoutbox.Relay.
func (d *DB) Outbox() idemoutbox.Store {
	if d.SQLite != nil {
		return d.SQLite
	}
	return d.Postgres
}
