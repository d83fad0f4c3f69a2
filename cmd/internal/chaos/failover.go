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
