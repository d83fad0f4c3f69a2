package pgcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv marks the copy of the test binary that TestClusterDiesWithProcess
// starts and kills.
const childEnv = "IDEM_PGCLUSTER_CHILD"

func TestClusterDiesWithProcess(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		runClusterChild(t)
		return
	}
	t.Parallel()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterDiesWithProcess$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe() // kept open: the child waits on it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()

	type report struct {
		pid int
		dir string
	}
	reports := make(chan report, 1)
	go func() {
		defer close(reports)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r report
			if _, err := fmt.Sscanf(sc.Text(), "pgcluster-child pid=%d dir=%s", &r.pid, &r.dir); err == nil {
				reports <- r
				return
			}
		}
	}()
	var r report
	select {
	case got, ok := <-reports:
		if !ok {
			t.Fatal("child exited without reporting a cluster")
		}
		r = got
	case <-time.After(2 * time.Minute):
		t.Fatal("child did not report a cluster within 2 minutes")
	}
	t.Cleanup(func() { os.RemoveAll(r.dir) })
	if !processAlive(r.pid) {
		t.Fatalf("server pid %d is not running before the child is killed", r.pid)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waited = true

	begin := time.Now()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for processAlive(r.pid) {
		select {
		case <-deadline:
			t.Fatalf("server pid %d still running 30s after its parent was killed", r.pid)
		case <-tick.C:
		}
	}
	t.Logf("server exited %s after its parent was killed", time.Since(begin).Round(time.Millisecond))

	// Any cluster starting in the same temporary directory may sweep it
	// first; either way it must be gone afterwards.
	sweepStale(filepath.Dir(r.dir))
	if _, err := os.Stat(r.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sweep left the directory of a dead owner: stat: %v", err)
	}
}

// runClusterChild starts a cluster, reports it on stdout and waits to be
// killed.
func runClusterChild(t *testing.T) {
	c, err := New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pid := c.PID()
	fmt.Printf("pgcluster-child pid=%d dir=%s\n", pid, c.dir)
	buf := make([]byte, 1)
	_, _ = os.Stdin.Read(buf) // returns when the parent closes stdin, if it never kills us
}

func TestSweepStale(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	mk := func(name string, lockFile bool) string {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if lockFile {
			if err := os.WriteFile(filepath.Join(dir, ownerLockName), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	live := mk(dirPrefix+"1-live", true)
	dead := mk(dirPrefix+"2-dead", true)
	noLock := mk(dirPrefix+"3-nolock", false)
	foreign := mk("other-dir", true)
	serverUp := mk(dirPrefix+"4-server", true)
	// The test process itself plays a server still running on that data.
	if err := os.WriteFile(filepath.Join(serverUp, "data", "postmaster.pid"), fmt.Appendf(nil, "%d\n/data\n", os.Getpid()), 0o600); err != nil {
		t.Fatal(err)
	}

	// A live owner holds its lock through its own open file.
	held, err := os.Open(filepath.Join(live, ownerLockName))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	sweepStale(base)

	for dir, wantKept := range map[string]bool{live: true, dead: false, noLock: true, foreign: true, serverUp: true} {
		_, err := os.Stat(dir)
		if kept := err == nil; kept != wantKept {
			t.Errorf("%s: kept = %v, want %v", filepath.Base(dir), kept, wantKept)
		}
	}
}

func TestMakeClusterDirLocksOwner(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir, lock, err := makeClusterDir(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("%s%d-", dirPrefix, os.Getpid())) {
		t.Errorf("directory %s does not name this process", dir)
	}
	if ownerGone(dir) {
		t.Fatal("ownerGone = true while the owner holds its lock")
	}
	lock.Close()
	if !ownerGone(dir) {
		t.Error("ownerGone = false after the owner released its lock")
	}
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mkBin := func(dir string, names ...string) string {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	lib := filepath.Join(root, "lib")
	v96 := mkBin(filepath.Join(lib, "9.6", "bin"), "initdb", "postgres")
	v15 := mkBin(filepath.Join(lib, "15", "bin"), "initdb", "postgres")
	mkBin(filepath.Join(lib, "16", "bin"), "initdb") // no server binary
	glob := filepath.Join(lib, "*", "bin")
	onPath := mkBin(filepath.Join(root, "opt", "pg", "bin"), "initdb", "postgres")
	link := mkBin(filepath.Join(root, "usr", "local", "bin"))
	if err := os.Symlink(filepath.Join(onPath, "initdb"), filepath.Join(link, "initdb")); err != nil {
		t.Fatal(err)
	}
	notExec := mkBin(filepath.Join(root, "noexec", "bin"))
	for _, n := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(notExec, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	pathWith := func(found map[string]string) func(string) (string, error) {
		return func(name string) (string, error) {
			if p, ok := found[name]; ok {
				return p, nil
			}
			return "", exec.ErrNotFound
		}
	}
	tests := []struct {
		name     string
		lookPath func(string) (string, error)
		glob     string
		want     string
		wantErr  bool
	}{
		{name: "PrefersPATHThroughSymlink", lookPath: pathWith(map[string]string{"initdb": filepath.Join(link, "initdb")}), glob: glob, want: onPath},
		{name: "PicksHighestCompleteVersion", lookPath: pathWith(nil), glob: glob, want: v15},
		{name: "SkipsPATHDirWithoutServer", lookPath: pathWith(map[string]string{"initdb": filepath.Join(lib, "16", "bin", "initdb")}), glob: glob, want: v15},
		{name: "ComparesVersionsNumerically", lookPath: pathWith(nil), glob: filepath.Join(lib, "9*", "bin"), want: v96},
		{name: "IgnoresNonExecutables", lookPath: pathWith(map[string]string{"initdb": filepath.Join(notExec, "initdb"), "postgres": filepath.Join(notExec, "postgres")}), glob: filepath.Join(root, "none", "*"), wantErr: true},
		{name: "UnavailableWhenNothingFound", lookPath: pathWith(nil), glob: filepath.Join(root, "none", "*"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := findBinDir(tt.lookPath, tt.glob)
			if tt.wantErr {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("findBinDir = %q, %v; want an ErrUnavailable error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("findBinDir = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int // sign
	}{
		{"15", "9.6", 1},
		{"9.6", "15", -1},
		{"16", "16", 0},
		{"10", "9", 1},
		{"9.6", "9.5", 1},
		{"devel", "9", -1},
		{"15", "15.1", -1},
	}
	for _, tt := range tests {
		t.Run(tt.a+"vs"+tt.b, func(t *testing.T) {
			t.Parallel()
			got := compareVersions(tt.a, tt.b)
			if sign(got) != tt.want {
				t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

func sign(n int) int {
	switch {
	case n > 0:
		return 1
	case n < 0:
		return -1
	}
	return 0
}

func TestTraversable(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	for _, d := range []string{tmp, filepath.Dir(tmp)} { // made private by the testing package
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(tmp, "a", "b")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Dir(dir)
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	other := st.Uid + 4242
	otherGroup := st.Gid + 4242
	tests := []struct {
		name       string
		parentMode os.FileMode
		uid, gid   uint32
		want       bool
	}{
		{name: "OthersMaySearch", parentMode: 0o711, uid: other, gid: otherGroup, want: true},
		{name: "PrivateParentBlocksOthers", parentMode: 0o700, uid: other, gid: otherGroup, want: false},
		{name: "GroupBitServesGroup", parentMode: 0o710, uid: other, gid: st.Gid, want: true},
		{name: "OwnerBitServesOwner", parentMode: 0o700, uid: st.Uid, gid: otherGroup, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { // not parallel: the cases share parent's mode
			if err := os.Chmod(parent, tt.parentMode); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(parent, 0o755) })
			// t.TempDir's own directories may be private to their owner.
			if !traversable(filepath.Dir(parent), other, otherGroup) && tt.uid == other {
				t.Skipf("the temporary directory above %s is private", parent)
			}
			if got := traversable(dir, tt.uid, tt.gid); got != tt.want {
				t.Errorf("traversable(%s with parent %o, uid %d, gid %d) = %v, want %v", dir, tt.parentMode, tt.uid, tt.gid, got, tt.want)
			}
		})
	}
}

func TestClusterCrashAndStart(t *testing.T) {
	t.Parallel()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	c, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pid := c.PID()
	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatalf("server pid %d still running after Crash returned", pid)
	}
	if err := ping(ctx, c.URL("postgres"), 2*time.Second); err == nil {
		t.Error("a crashed cluster accepted a connection")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start after crash: %v", err)
	}
	if err := ping(ctx, c.URL("postgres"), 10*time.Second); err != nil {
		t.Errorf("no connection after crash recovery: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s still there after Close (stat: %v)", c.Dir(), err)
	}
}

// A server that exits on its own (a PANIC on a full disk, a kill from
// outside) is started again by Start, which used to take it for running.
func TestClusterStartAfterServerExited(t *testing.T) {
	t.Parallel()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	c, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	// Immediate shutdown from outside the Cluster, as the server's own
	// PANIC would end it.
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the server did not exit within a minute of SIGQUIT")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start after the server exited: %v", err)
	}
	if pid := c.PID(); pid == 0 || pid == p.cmd.Process.Pid {
		t.Fatalf("Start did not start a new server (pid %d, the dead one was %d)", pid, p.cmd.Process.Pid)
	}
	if err := ping(ctx, c.URL("postgres"), 10*time.Second); err != nil {
		t.Errorf("no connection after Start: %v", err)
	}
}
