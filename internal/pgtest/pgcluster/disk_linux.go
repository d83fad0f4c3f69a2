package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// walFiller is the file that FillWAL writes on the WAL's file system.
const walFiller = "filler"

// LimitWAL moves the cluster's write-ahead log to a file system of its own
// of size bytes (a tmpfs mounted in the cluster's directory: it needs
// root), restarting the server, so that FillWAL can fill it. The server
// then keeps at most a third of size of WAL between checkpoints. Close
// unmounts it.
func (c *Cluster) LimitWAL(ctx context.Context, size int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.walDir != "" {
		return errors.New("pgcluster: the WAL is limited already")
	}
	dir := filepath.Join(c.dir, "wal")
	if err := c.mkdirOwned(dir); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10)+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: mount a tmpfs for the WAL: %v: %s", err, out)
	}
	c.walDir, c.walSize = dir, size
	if err := chownTo(dir, c.cred); err != nil {
		return err
	}
	if err := c.stop(); err != nil {
		return err
	}
	wal := filepath.Join(c.dataDir, "pg_wal")
	if out, err := exec.CommandContext(ctx, "cp", "-a", wal+"/.", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: copy the WAL: %v: %s", err, out)
	}
	if err := os.RemoveAll(wal); err != nil {
		return fmt.Errorf("pgcluster: move the WAL: %w", err)
	}
	if err := os.Symlink(dir, wal); err != nil {
		return fmt.Errorf("pgcluster: move the WAL: %w", err)
	}
	return c.start(ctx)
}

// FillWAL takes all the free space of the WAL's file system (LimitWAL):
// the server's next WAL segment cannot be written, and it stops with a
// PANIC, as on a full disk. FreeWAL gives the space back.
func (c *Cluster) FillWAL() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.walDir == "" {
		return errors.New("pgcluster: FillWAL needs LimitWAL")
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(c.walDir, &st); err != nil {
		return fmt.Errorf("pgcluster: fill the WAL: %w", err)
	}
	f, err := os.Create(filepath.Join(c.walDir, walFiller))
	if err != nil {
		return fmt.Errorf("pgcluster: fill the WAL: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			return nil // full: ENOSPC is the point
		}
	}
}

// FreeWAL removes what FillWAL wrote.
func (c *Cluster) FreeWAL() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.walDir == "" {
		return nil
	}
	if err := os.Remove(filepath.Join(c.walDir, walFiller)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgcluster: free the WAL: %w", err)
	}
	return nil
}

// Running reports whether the server runs: false after Stop or Crash, and
// after it exited on its own (a PANIC on a full disk).
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return false
	}
	select {
	case <-c.proc.done:
		c.proc = nil
		return false
	default:
		return true
	}
}

// unmountWAL undoes LimitWAL's mount. The caller holds c.mu, and the
// server is stopped.
func (c *Cluster) unmountWAL() error {
	if c.walDir == "" {
		return nil
	}
	if out, err := exec.Command("umount", c.walDir).CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: unmount the WAL: %v: %s", err, out)
	}
	c.walDir = ""
	return nil
}
