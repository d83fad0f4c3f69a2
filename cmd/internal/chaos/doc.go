// Package chaos is the harness behind idem chaos: it deploys the reference
// payments service on one machine, drives traffic at it while killing,
// pausing and cutting everything, and then audits every answer against the
// database.
//
// A run starts a throwaway PostgreSQL cluster (internal/pgcluster),
// processord, and N paymentsd processes built from the checkout, all on
// 127.0.0.1. Instance 0 reaches PostgreSQL through a loopback proxy
// (internal/pgproxy) that can cut its connection around a COMMIT. The
// instances run their payments by phases with a short lease, so that a paused
// holder's key is taken over while it sleeps, and charge through processord
// with derived keys, and deliver their outbox's events to a webhook
// receiver in the harness, which verifies every signature and
// answers some deliveries 500 on a schedule drawn from the seed.
//
// With Config.Store set to StoreMySQL the database is a throwaway mariadbd
// instead (cmd/internal/mariadb), shared by the instances; its restart is
// a SIGKILL, after which InnoDB recovers from its redo log; the network
// faults fall on its links too, and there are no commit cuts (their proxy
// speaks PostgreSQL's protocol), full disks, failovers nor proxy
// workload. With StoreSQLite one instance runs on its embedded file, with
// no database restarts nor commit cuts.
//
// Faults fall on a schedule drawn from the seed ([Schedule]): SIGKILL of
// an instance, which its supervisor restarts; SIGSTOP for longer than the
// lease, then SIGCONT; PostgreSQL stopped as pg_ctl stop -m immediate does,
// then started again; a commit cut between instance 0 and PostgreSQL.
// processord fails charges, loses answers after charging and answers late,
// at rates drawn from the seed ([ProcessorFaults]).
//
// With queued transfers ([QueuedTransfer], or Config.QueueCommands) the
// run starts a throwaway broker as well (Config.Queue): a nats-server with
// JetStream on a file store, killed with SIGKILL and restarted during the
// traffic, or a RabbitMQ node of its own (internal/rabbittest/rabbitnode),
// published to with confirms. Every instance consumes it with
// -transfers-from through a toxiproxy link of its own, which faults cut on
// a schedule of their own. When the faults stop, the harness waits until
// the broker holds nothing more and every command's key is completed; a
// command whose key never is counts as lost.
//
// Clients run [Workload]s: duplicate storms across instances, retries with
// idemclient's backoff until a final answer, and reuse of a remembered key
// with a changed body. Every attempt is recorded ([Attempt]). When the
// faults stop, every operation without a final answer is retried until it
// has one, every acknowledged payment is sent again to each instance, the
// harness waits for the event of every acknowledged payment, and the
// checker compares the history with PostgreSQL, processord's charges and
// the events received. The [Summary] counts each kind of violation; the history of the
// offending operations goes to a file.
package chaos
