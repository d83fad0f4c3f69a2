package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/child"
)

const (
	// binGlob is where distribution packages install the server binaries.
	binGlob = "/usr/lib/postgresql/*/bin"

	// serverUser runs initdb and postgres when the tests run as root.
	serverUser = "postgres"

	// dirPrefix starts the name of every cluster directory; ownerLockName is
	// the lock file inside it that the owner process holds.
	dirPrefix     = "idem-pgtest-"
	ownerLockName = "owner.lock"

	readyTimeout = 30 * time.Second
	readyPoll    = 20 * time.Millisecond
	stopTimeout  = 30 * time.Second
	killTimeout  = 10 * time.Second
	initTimeout  = 2 * time.Minute
	portAttempts = 3
	logTailBytes = 4096
	logTailLines = 25
)

// errPortInUse reports that the server could not bind its port.
var errPortInUse = errors.New("pgcluster: port already in use")

// Cluster is a throwaway PostgreSQL cluster in a temporary directory,
// listening on 127.0.0.1 with trust authentication for the user postgres.
// It keeps its port and data directory for its whole life.
//
// Its methods are meant for the goroutine running the test, like t.Fatal.
type Cluster struct {
	dir     string // temporary directory, removed by close
	dataDir string
	sockDir string
	logPath string
	bin     string              // directory of initdb and postgres
	cred    *syscall.Credential // nil unless running as root
	lock    *os.File            // held open, and locked, while the cluster lives
	port    int

	mu     sync.Mutex
	proc   *process // nil while stopped
	closed bool
}

// process is one run of the postgres server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the result of cmd.Wait, set before done is closed
}

// New initialises a cluster in a new temporary directory and starts it.
// Its error is an *UnavailableError when the machine cannot run one: no
// server binaries, or running as root without a postgres user.
func New(ctx context.Context) (*Cluster, error) {
	spec, err := locate()
	if err != nil {
		return nil, err
	}
	return spec.create(ctx)
}

// Available returns nil when the machine can run a cluster, and an
// *UnavailableError saying why not otherwise.
func Available() error {
	_, err := locate()
	return err
}

// URL returns the connection string of database on the cluster.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, url.PathEscape(database))
}

// Port returns the TCP port the cluster listens on, on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir returns the cluster's temporary directory, removed by Close.
func (c *Cluster) Dir() string { return c.dir }

// PID returns the process id of the running server, or 0 while it is
// stopped.
func (c *Cluster) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0
	}
	return c.proc.cmd.Process.Pid
}

// Stop shuts the server down (fast shutdown: sessions are ended, work is
// checkpointed) and waits until it has exited. Stopping a stopped cluster
// does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stop()
}

// Crash stops the server as pg_ctl stop -m immediate does, with SIGQUIT: no
// checkpoint, sessions cut, and crash recovery at the next start; then it
// waits until the server has exited. Crashing a stopped cluster does
// nothing.
func (c *Cluster) Crash() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc
	if p == nil {
		return nil
	}
	c.proc = nil
	c.kill(p)
	return nil
}

// Start starts the server again on the same port and data directory and
// waits until it accepts connections. Starting a running cluster does
// nothing.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start(ctx)
}

// Restart stops the server, then starts it as Start does.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stop(); err != nil {
		return err
	}
	return c.start(ctx)
}

// CreateDatabase creates the database name on the running cluster and
// returns its connection string.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, databaseTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgcluster: connect to cluster: %v%s", err, c.logTail())
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	return c.URL(name), nil
}

// clusterSpec is what creating a cluster needs from the machine.
type clusterSpec struct {
	bin  string
	cred *syscall.Credential
}

// locate finds the server binaries and, when running as root, the user to
// run them as. Its errors are *UnavailableError.
func locate() (clusterSpec, error) {
	bin, err := findBinDir(exec.LookPath, binGlob)
	if err != nil {
		return clusterSpec{}, err
	}
	cred, err := serverCredential()
	if err != nil {
		return clusterSpec{}, err
	}
	return clusterSpec{bin: bin, cred: cred}, nil
}

// create initialises a cluster in a new temporary directory and starts it.
func (s clusterSpec) create(ctx context.Context) (_ *Cluster, err error) {
	base, err := tempBase(s.cred)
	if err != nil {
		return nil, err
	}
	sweepStale(base)
	dir, lock, err := makeClusterDir(base, s.cred)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"),
		bin:     s.bin,
		cred:    s.cred,
		lock:    lock,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if err := c.mkdirOwned(c.sockDir); err != nil {
		return nil, err
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for attempt := 1; ; attempt++ {
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
		err = c.start(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return nil, err
		}
	}
	return c, nil
}

// initdb creates the data directory with trust authentication.
func (c *Cluster) initdb(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "initdb"),
		"-D", c.dataDir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, tail(string(out)))
	}
	return nil
}

// start runs the server and waits until it accepts connections. The caller
// holds c.mu.
func (c *Cluster) start(ctx context.Context) error {
	if c.closed {
		return errors.New("pgcluster: start: cluster already removed")
	}
	if c.proc != nil {
		return nil
	}
	logFile, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: open server log: %w", err)
	}
	offset, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		logFile.Close()
		return fmt.Errorf("pgcluster: open server log: %w", err)
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"),
		"-D", c.dataDir,
		"-p", strconv.Itoa(c.port),
		"-k", c.sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "max_connections=200",
	)
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.cred,
		// SIGINT is a fast shutdown: the server does not wait for sessions.
		Pdeathsig: syscall.SIGINT,
	}
	err = child.Start(cmd)
	logFile.Close()
	if err != nil {
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := c.waitReady(ctx, p); err != nil {
		c.kill(p)
		if strings.Contains(c.logSince(offset), "Address already in use") {
			return fmt.Errorf("%w: 127.0.0.1:%d: %v", errPortInUse, c.port, err)
		}
		return fmt.Errorf("pgcluster: start postgres on 127.0.0.1:%d: %w%s", c.port, err, c.logTail())
	}
	c.proc = p
	return nil
}

// waitReady polls until the server accepts a connection, exits, or
// readyTimeout passes.
func (c *Cluster) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		err := ping(ctx, c.URL("postgres"), time.Second)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("server exited during startup: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("server not accepting connections after %s: %v", readyTimeout, err)
		case <-tick.C:
		}
	}
}

// stop shuts the server down and waits for it. The caller holds c.mu.
func (c *Cluster) stop() error {
	p := c.proc
	if p == nil {
		return nil
	}
	c.proc = nil
	select {
	case <-p.done:
		return fmt.Errorf("pgcluster: stop: server had already exited: %v%s", p.err, c.logTail())
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.kill(p)
		return fmt.Errorf("pgcluster: stop: signal server: %w", err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("pgcluster: stop: server exited with %v%s", p.err, c.logTail())
		}
		return nil
	case <-timer.C:
		c.kill(p)
		return fmt.Errorf("pgcluster: stop: server still running after %s, killed it%s", stopTimeout, c.logTail())
	}
}

// kill ends p at once: immediate shutdown, then SIGKILL if that hangs.
func (c *Cluster) kill(p *process) {
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	timer := time.NewTimer(killTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Close stops the cluster and removes its directory. It may be called more
// than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	errs = append(errs, c.stop())
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("pgcluster: remove cluster directory: %w", err))
	}
	if c.lock != nil {
		c.lock.Close()
	}
	return errors.Join(errs...)
}

// mkdirOwned makes the directory path for the server user.
func (c *Cluster) mkdirOwned(path string) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return fmt.Errorf("pgcluster: make cluster directory: %w", err)
	}
	return chownTo(path, c.cred)
}

// logTail returns the end of the server log, prefixed by a line break, or
// "" when the log is empty or missing.
func (c *Cluster) logTail() string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return ""
	}
	offset := max(info.Size()-logTailBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, offset, info.Size()-offset))
	if err != nil || len(b) == 0 {
		return ""
	}
	return "\nserver log " + c.logPath + " (end):\n" + tail(string(b))
}

// logSince returns the server log written after offset.
func (c *Cluster) logSince(offset int64) string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
	return string(b)
}

// tail returns the last logTailLines lines of s.
func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// findBinDir returns the first directory holding both initdb and postgres:
// that of initdb or postgres on PATH (symbolic links resolved), then the
// directories matching glob, highest version first. Its error is an
// *UnavailableError.
func findBinDir(lookPath func(file string) (string, error), glob string) (string, error) {
	var candidates []string
	for _, name := range []string{"initdb", "postgres"} {
		p, err := lookPath(name)
		if err != nil {
			continue
		}
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			p = resolved
		}
		candidates = append(candidates, filepath.Dir(p))
	}
	versioned, _ := filepath.Glob(glob)
	slices.SortStableFunc(versioned, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	candidates = append(candidates, versioned...)
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", &UnavailableError{Reasons: []string{
		"no PostgreSQL server binaries (initdb and postgres) on PATH or in " + glob,
	}}
}

// compareVersions compares dotted version numbers such as "9.6" and "15";
// a part that is not a number sorts first.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		na, nb := -1, -1
		if i < len(pa) {
			if n, err := strconv.Atoi(pa[i]); err == nil {
				na = n
			}
		}
		if i < len(pb) {
			if n, err := strconv.Atoi(pb[i]); err == nil {
				nb = n
			}
		}
		if na != nb {
			return na - nb
		}
	}
	return 0
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}

// serverCredential returns the postgres system user's credential when the
// process runs as root, and nil otherwise.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	unavailable := func(why string) error {
		return &UnavailableError{Reasons: []string{
			"running as root, which PostgreSQL refuses, and " + why,
		}}
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, unavailable("no " + serverUser + " system user to run the server as")
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, unavailable("the " + serverUser + " user has a non-numeric uid " + u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, unavailable("the " + serverUser + " user has a non-numeric gid " + u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// tempBase returns the directory to make cluster directories in: the
// system temporary directory, or /tmp if the server user cannot reach the
// former.
func tempBase(cred *syscall.Credential) (string, error) {
	for _, dir := range []string{os.TempDir(), "/tmp"} {
		resolved, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if cred == nil || traversable(resolved, cred.Uid, cred.Gid) {
			return resolved, nil
		}
	}
	return "", fmt.Errorf("pgcluster: the %s user cannot reach %s or /tmp; set TMPDIR to a directory it can traverse", serverUser, os.TempDir())
}

// traversable reports whether the user uid with primary group gid may
// search every directory from path up to the root, by the permission bits.
func traversable(path string, uid, gid uint32) bool {
	for p := path; ; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err != nil {
			return false
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		perm := info.Mode().Perm()
		var bit os.FileMode
		switch {
		case st.Uid == uid:
			bit = 0o100
		case st.Gid == gid:
			bit = 0o010
		default:
			bit = 0o001
		}
		if perm&bit == 0 {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

// makeClusterDir makes a cluster directory in base, owned by the server
// user, holding a lock file that the returned file keeps locked. The lock is
// taken before the file gets its final name, so sweepStale never sees an
// unlocked lock file of a live owner.
func makeClusterDir(base string, cred *syscall.Credential) (string, *os.File, error) {
	dir, err := os.MkdirTemp(base, dirPrefix+strconv.Itoa(os.Getpid())+"-*")
	if err != nil {
		return "", nil, fmt.Errorf("pgcluster: make cluster directory: %w", err)
	}
	fail := func(err error) (string, *os.File, error) {
		return "", nil, errors.Join(fmt.Errorf("pgcluster: make cluster directory: %w", err), os.RemoveAll(dir))
	}
	if err := chownTo(dir, cred); err != nil {
		return fail(err)
	}
	pending := filepath.Join(dir, ownerLockName+".new")
	lock, err := os.OpenFile(pending, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return fail(err)
	}
	if err := os.Rename(pending, filepath.Join(dir, ownerLockName)); err != nil {
		lock.Close()
		return fail(err)
	}
	return dir, lock, nil
}

// sweepStale removes the cluster directories in base whose owner process is
// gone: their lock file can be locked, and no server runs on their data.
// It is best effort and leaves anything it is unsure about.
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		if ownerGone(dir) {
			_ = os.RemoveAll(dir)
		}
	}
}

// ownerGone reports whether the process that made dir has died.
func ownerGone(dir string) bool {
	f, err := os.Open(filepath.Join(dir, ownerLockName))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	return !postmasterAlive(filepath.Join(dir, "data"))
}

// postmasterAlive reports whether the server process named in the
// postmaster.pid file of dataDir is running.
func postmasterAlive(dataDir string) bool {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return false
	}
	return processAlive(pid)
}

// processAlive reports whether pid names a process that has not exited; a
// zombie counts as exited.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs: trust kill
	}
	// The state follows the command name, which is in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// chownTo gives path to the user of cred, if any.
func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serverEnv is the environment of initdb and postgres: this process's,
// without the PG* variables that could point them elsewhere.
func serverEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG")
	})
}
