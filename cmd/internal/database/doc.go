// Package database opens the key store named by a database URL, for the
// binaries that take one (paymentsd, the idem operator commands and the
// benchmark): sqlite:PATH opens an idemsqlite store, postgres://... (or
// postgresql://...) a pgx pool and an idempg store on it.
//
// It knows nothing of what else lives in the database; the payments
// repository is built on top of a [DB] by the payments package.
package database
