package database

import "github.com/idemkit/idem/idemoutbox"

// Outbox returns the store's outbox: events enqueued in a request's
// transaction, delivered by an idemoutbox.Relay.
func (d *DB) Outbox() idemoutbox.Store {
	switch {
	case d.SQLite != nil:
		return d.SQLite
	case d.MySQL != nil:
		return d.MySQL
	}
	return d.Postgres
}
