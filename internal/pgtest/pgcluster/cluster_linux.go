package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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

	// walDir is the tmpfs of LimitWAL, and walSize its size; "" without.
	walDir  string
	walSize int64

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
// nothing; a server that exited on its own is started again.
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
		select {
		case <-c.proc.done:
			// It exited on its own (a PANIC on a full disk, a kill from
			// outside): start it again.
			c.proc = nil
		default:
			return nil
		}
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
	if c.walSize > 0 {
		// Checkpoints often enough that the WAL fits its file system.
		cmd.Args = append(cmd.Args, "-c", fmt.Sprintf("max_wal_size=%dkB", c.walSize/3/1024), "-c", "min_wal_size=32MB")
	}
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
	errs = append(errs, c.unmountWAL())
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
