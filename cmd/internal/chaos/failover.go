package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/pgtest/pgcluster"
)

// startReplication gives the primary its first standby, and with
// synchronous replication waits until commits wait for it.
func (h *harness) startReplication(ctx context.Context) error {
	s, err := h.newStandby(ctx)
	if err != nil {
		return err
	}
	h.standby = s
	sync := h.cfg.Replication == ReplicationSync
	if sync {
		if err := h.cluster.SetSynchronous(ctx, true); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	if err := h.cluster.WaitStandby(ctx, sync); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// replicationLag delays the WAL stream of an asynchronous standby, as a
// standby in another zone is: the acknowledged commits of the last lag
// before a failover have not reached it, and are lost. A synchronous
// standby streams without it (each commit would wait for it).
const replicationLag = 50 * time.Millisecond

// walSize is the tmpfs that holds PostgreSQL's WAL for the full-disk
// faults.
const walSize = 192 << 20

// limitWAL puts the primary's WAL on a file system of its own for the
// full-disk faults, or turns them off when that cannot be done here (it
// needs root).
func (h *harness) limitWAL(ctx context.Context) {
	if h.cfg.Faults.DiskFullEvery < 0 {
		return
	}
	if err := h.cluster.LimitWAL(ctx, walSize); err != nil {
		fmt.Fprintf(h.cfg.Progress, "chaos: no full-disk faults: %v\n", err)
		h.cfg.Faults.DiskFullEvery = -1
	}
}

// fillDisk fills the WAL's file system for hold, then frees it and starts
// PostgreSQL again if it stopped. The caller holds dbMu.
func (h *harness) fillDisk(mark faultMark, hold time.Duration) error {
	if err := h.cluster.FillWAL(); err != nil {
		return fmt.Errorf("chaos: fill the disk: %w", err)
	}
	h.faults.diskFull.Add(1)
	mark.Hold = hold
	h.faultLog.add(mark)
	time.Sleep(hold)
	if err := h.cluster.FreeWAL(); err != nil {
		return fmt.Errorf("chaos: free the disk: %w", err)
	}
	if h.cluster.Running() {
		return nil
	}
	return h.startDB(h.cluster, "after the full disk")
}

// restartDB stops the database server as pg_ctl stop -m immediate does,
// then starts it again after hold (crash recovery). The caller holds
// dbMu.
func (h *harness) restartDB(mark faultMark, hold time.Duration) error {
	server := h.dbServer()
	if err := server.Crash(); err != nil {
		return fmt.Errorf("chaos: crash the database: %w", err)
	}
	h.faults.dbRestarts.Add(1)
	mark.Hold = hold
	h.faultLog.add(mark)
	time.Sleep(hold)
	return h.startDB(server, "again")
}

// startDB starts server, trying a few times: under load a start can miss
// its deadline.
func (h *harness) startDB(server dbServer, when string) error {
	if err := retry(func() error { return server.Start(context.Background()) }); err != nil {
		return fmt.Errorf("chaos: start the database %s: %w", when, err)
	}
	return nil
}

// dbAttempts is how many times a step of a database fault that can be
// repeated (a start, a standby, a setting) is tried before the run fails.
const dbAttempts = 3

// replicationPartition is how long a standby is cut off from its primary
// before the primary dies, at each failover.
const replicationPartition = time.Second

// newStandby makes a standby of the primary, streaming through a link of
// its own.
func (h *harness) newStandby(ctx context.Context) (*pgcluster.Cluster, error) {
	lag := time.Duration(0)
	if h.cfg.Replication == ReplicationAsync {
		lag = replicationLag
	}
	via, err := h.net.routeReplication(len(h.retired), "127.0.0.1:"+strconv.Itoa(h.cluster.Port()), lag)
	if err != nil {
		return nil, err
	}
	s, err := h.cluster.NewStandby(ctx, via)
	if err != nil {
		return nil, fmt.Errorf("chaos: make a standby: %w", err)
	}
	if h.cfg.Faults.DiskFullEvery > 0 {
		// The next primary's disk fills too.
		if err := s.LimitWAL(ctx, walSize); err != nil {
			s.Close()
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	return s, nil
}

// failover stops the primary as pg_ctl stop -m immediate does, promotes
// its standby, moves every connection to it (the primary's link, which
// every instance and the harness itself reach PostgreSQL through), and
// makes the next standby from the new primary. With synchronous
// replication the new primary is made synchronous before any connection
// reaches it, so its commits wait until that standby streams: no
// acknowledged write ever rests on one server only. The caller holds
// dbMu.
func (h *harness) failover(mark faultMark) error {
	if h.standby == nil {
		return nil
	}
	ctx := context.Background()
	old, next := h.cluster, h.standby
	// The standby is cut off from the primary first, as in the failovers
	// that lose data: the primary goes on acknowledging commits that only
	// it has (asynchronous replication), or holds them until the standby
	// confirms (synchronous), then dies with the partition still on.
	go h.net.partition(len(h.retired), 2*replicationPartition)
	time.Sleep(replicationPartition)
	if err := old.Crash(); err != nil {
		return fmt.Errorf("chaos: stop the primary: %w", err)
	}
	h.faults.failovers.Add(1)
	h.faultLog.add(mark)
	// From here on next is the primary, whatever fails: the old one is
	// retired at once, so that no later fault starts it again beside the
	// new one (two primaries, the clients on neither).
	h.cluster, h.standby = next, nil
	h.retired = append(h.retired, old)
	if err := next.Promote(ctx); err != nil {
		return fmt.Errorf("chaos: promote the standby: %w", err)
	}
	if h.cfg.Replication == ReplicationSync {
		// Before any client reaches it: from the first commit on, the new
		// primary waits for its standby (ALTER SYSTEM on the old primary
		// came after the base backup, so the setting is not inherited).
		if err := retry(func() error { return next.SetSynchronous(ctx, true) }); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	h.net.movePrimary("127.0.0.1:" + strconv.Itoa(next.Port()))
	var s *pgcluster.Cluster
	err := retry(func() (err error) {
		s, err = h.newStandby(ctx)
		return err
	})
	if err != nil {
		return err
	}
	h.standby = s
	if err := next.WaitStandby(ctx, h.cfg.Replication == ReplicationSync); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// retry runs f until it succeeds, at most dbAttempts times, and returns
// its last error.
func retry(f func() error) error {
	var err error
	for range dbAttempts {
		if err = f(); err == nil {
			return nil
		}
	}
	return err
}

// dbFault applies a fault on the database: a restart, a failover or a
// full disk. One at a time, with dbMu held: each acts on the primary,
// which a failover replaces. When the fault is over, the primary's link
// must reach a running primary again (checkPrimary); a fault that cannot
// be undone is an error, which ends the run at once.
func (h *harness) dbFault(kind FaultKind, f func() error) error {
	h.dbMu.Lock()
	defer h.dbMu.Unlock()
	h.stall.dbBegin(kind, time.Now())
	defer func() { h.stall.dbEnd(time.Now()) }()
	if err := f(); err != nil {
		return fmt.Errorf("%w (during a %s fault)", err, kind)
	}
	if err := h.checkPrimary(context.Background()); err != nil {
		return fmt.Errorf("%w (after a %s fault)", err, kind)
	}
	return nil
}

// primaryCheckTimeout bounds checkPrimary; primaryCheckPoll is the pause
// between two of its probes.
const (
	primaryCheckTimeout = time.Minute
	primaryCheckPoll    = 200 * time.Millisecond
)

// checkPrimary makes sure that the primary's link reaches the primary,
// the harness's h.cluster: a server that answers through the link, on the
// primary's port, out of recovery. What it can, it repairs: the link
// pointing elsewhere is moved back, a primary that is not running is
// started. It returns an error saying what it saw if the primary still
// cannot be reached after primaryCheckTimeout. The caller holds dbMu. On
// MariaDB, which never moves, there is nothing to check.
func (h *harness) checkPrimary(ctx context.Context) error {
	if h.cluster == nil || h.mariadb != nil || h.net == nil || h.net.primary == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, primaryCheckTimeout)
	defer cancel()
	want := "127.0.0.1:" + strconv.Itoa(h.cluster.Port())
	for {
		err := h.probePrimary(ctx)
		if err == nil {
			return nil
		}
		if got := h.net.primaryTarget(); got != want {
			fmt.Fprintf(h.cfg.Progress, "chaos: the primary's link pointed at %s, not the primary %s: moved it\n", got, want)
			h.net.movePrimary(want)
		} else if !h.cluster.Running() {
			fmt.Fprintf(h.cfg.Progress, "chaos: the primary %s was not running: starting it\n", want)
			if serr := h.cluster.Start(ctx); serr != nil {
				err = serr
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: the primary is lost: %s through its link %s (forwarding to %s): %w",
				want, h.net.primary.addr(), h.net.primaryTarget(), err)
		case <-time.After(primaryCheckPoll):
		}
	}
}

// probePrimary connects through the primary's link and returns nil if
// the server there is h.cluster and accepts writes.
func (h *harness) probePrimary(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, h.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var port int
	var recovery bool
	if err := conn.QueryRow(ctx, "SELECT inet_server_port(), pg_is_in_recovery()").Scan(&port, &recovery); err != nil {
		return err
	}
	switch {
	case port != h.cluster.Port():
		return fmt.Errorf("the link reaches the server on port %d, not the primary", port)
	case recovery:
		return errors.New("the primary is still in recovery (a standby)")
	}
	return nil
}
