// Command idem is the operator tool for services that use idem, the
// Idempotency-Key toolkit.
//
// Usage:
//
//	idem <command> [flags]
//
// The commands are:
//
//	check     test a live endpoint against the Idempotency-Key contract
//	bench     measure idem on the reference payments endpoint, as ratios to the bare endpoint
//	migrate   move the key table's schema to the newest version, or to a given one
//	purge     delete keys older than the retention period
//	keys      list, show, release or delete keys: find and free stuck keys
//	outbox    show the outbox's backlog and dead events, and retry dead events
//	chaos     run the payments service under kills, pauses and cuts, then audit every answer
//
// "idem help <command>" or "idem <command> -h" prints a command's flags; most
// flags have an environment-variable twin named in their help, such as
// IDEM_CHECK_URL for check's --url.
//
// Exit codes: 0 on success, 1 when a command ran and found a failure (for
// check: a required check did not pass), 2 for usage errors.
//
// SIGINT and SIGTERM cancel the running command; check then reports what it
// has so far.
package main
