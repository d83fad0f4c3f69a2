package chaos

import (
	"context"
	"fmt"
	"strconv"
	"time"

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
// PostgreSQL again if it stopped.
func (h *harness) fillDisk(mark faultMark, hold time.Duration) error {
	h.dbMu.Lock()
	defer h.dbMu.Unlock()
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
	var err error
	for range 3 {
		if err = h.cluster.Start(context.Background()); err == nil {
			return nil
		}
	}
	return fmt.Errorf("chaos: start PostgreSQL after the full disk: %w", err)
}

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
// its standby, moves every connection to it (the primary link's upstream,
// which every instance and the harness itself reach PostgreSQL through),
// and makes the next standby from the new primary. With synchronous
// replication the new primary is made synchronous before any connection
// reaches it, so its commits wait until that standby streams: no
// acknowledged write ever rests on one server only.
func (h *harness) failover(mark faultMark) error {
	h.dbMu.Lock()
	defer h.dbMu.Unlock()
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
	if err := next.Promote(ctx); err != nil {
		return fmt.Errorf("chaos: promote the standby: %w", err)
	}
	if h.cfg.Replication == ReplicationSync {
		// Before any client reaches it: from the first commit on, the new
		// primary waits for its standby (ALTER SYSTEM on the old primary
		// came after the base backup, so the setting is not inherited).
		if err := next.SetSynchronous(ctx, true); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	if err := h.net.movePrimary("127.0.0.1:" + strconv.Itoa(next.Port())); err != nil {
		return err
	}
	h.cluster, h.standby = next, nil
	h.retired = append(h.retired, old)
	s, err := h.newStandby(ctx)
	if err != nil {
		return err
	}
	h.standby = s
	if err := next.WaitStandby(ctx, h.cfg.Replication == ReplicationSync); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}
