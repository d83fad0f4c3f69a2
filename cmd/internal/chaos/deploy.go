package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/mariadb"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/internal/pgtest/pgcluster"
	"github.com/idemkit/idem/internal/pgtest/pgproxy"
)

// deploy builds the binaries, unless Config.BinDir has them, and starts
// every process.
func (h *harness) deploy(ctx context.Context) error {
	bin := h.cfg.BinDir
	if bin == "" {
		fmt.Fprintf(h.cfg.Progress, "chaos: seed %d: building paymentsd, processord and idemproxy\n", h.cfg.Seed)
		bin = filepath.Join(h.dir, "bin")
		if err := Build(ctx, h.cfg.SourceDir, bin, h.cfg.BuildTags); err != nil {
			return err
		}
	}
	paymentsd, processord := filepath.Join(bin, "paymentsd"), filepath.Join(bin, "processord")
	h.net = newNetwork()
	var err error
	switch h.cfg.Store {
	case StoreSQLite:
		fmt.Fprintf(h.cfg.Progress, "chaos: starting processord and paymentsd on SQLite\n")
		h.dbURL = "sqlite:" + filepath.Join(h.dir, "payments.db")
	case StoreMySQL:
		fmt.Fprintf(h.cfg.Progress, "chaos: starting MariaDB, processord and %d paymentsd instances\n", h.cfg.Instances)
		server, err := mariadb.New(ctx)
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		h.mariadb = server
		if h.dbURL, err = server.CreateDatabase(ctx, "chaos"); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		if h.dbURL, err = h.net.routePrimary(h.dbURL); err != nil {
			return err
		}
	default:
		fmt.Fprintf(h.cfg.Progress, "chaos: starting PostgreSQL, processord and %d paymentsd instances\n", h.cfg.Instances)
		if h.cluster, err = pgcluster.New(ctx); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		h.limitWAL(ctx)
		if h.cfg.Replication != "" {
			if err := h.startReplication(ctx); err != nil {
				return err
			}
		}
		if h.dbURL, err = h.cluster.CreateDatabase(ctx, "chaos"); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		if h.dbURL, err = h.net.routePrimary(h.dbURL); err != nil {
			return err
		}
	}
	h.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: h.cfg.Clients * 4,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
	}}

	addrs, err := freeAddrs(1)
	if err != nil {
		return err
	}
	h.processor = &process{
		name: "processord", path: processord, addr: addrs[0],
		args:    processordArgs(addrs[0], filepath.Join(h.dir, "processord.db"), h.cfg.ProcessorDelay, h.cfg.ProcessorFaults, h.cfg.Seed),
		logPath: filepath.Join(h.dir, "processord.log"),
	}
	h.processor.supervise()
	secret := idemoutbox.NewSecret()
	if h.receiver, err = startReceiver(secret, h.cfg.Seed); err != nil {
		return err
	}
	transfersFrom := ""
	if h.cfg.usesQueue() {
		if transfersFrom, err = h.startQueue(ctx); err != nil {
			return err
		}
	}
	// Every link of an instance passes a proxy of the network faults. The
	// links' listeners are opened before the instances' ports are picked,
	// so that none takes a port picked for an instance.
	type instanceLinks struct{ db, processor, webhook, transfersFrom string }
	routes := make([]instanceLinks, h.cfg.Instances)
	for i := range routes {
		r := &routes[i]
		r.db = h.dbURL
		if h.cfg.Store != StoreSQLite {
			if r.db, err = h.net.routeURL(LinkDatabase, i, h.dbURL); err != nil {
				return err
			}
			if i == 0 && h.cfg.Store == StorePostgres {
				// Commit cuts fall between instance 0 and PostgreSQL.
				if h.proxy, r.db, err = pgproxy.StartFor(r.db); err != nil {
					return fmt.Errorf("chaos: %w", err)
				}
			}
		}
		if r.processor, err = h.net.routeURL(LinkProcessor, i, "http://"+addrs[0]); err != nil {
			return err
		}
		if r.webhook, err = h.net.routeURL(LinkWebhook, i, h.receiver.url); err != nil {
			return err
		}
		if transfersFrom != "" {
			if r.transfersFrom, err = h.net.routeURL(LinkBroker, i, transfersFrom); err != nil {
				return err
			}
		}
	}
	if addrs, err = freeAddrs(h.cfg.Instances); err != nil {
		return err
	}
	for i, r := range routes {
		clock := filepath.Join(h.dir, fmt.Sprintf("clock-%d", i))
		if err := writeSkew(clock, 0); err != nil {
			return err
		}
		args := paymentsdArgs(addrs[i], r.db, r.processor, h.cfg.LockTimeout, r.webhook, secret)
		if r.transfersFrom != "" {
			args = append(args, "-transfers-from", r.transfersFrom)
		}
		p := &process{
			name: fmt.Sprintf("paymentsd-%d", i), path: paymentsd, addr: addrs[i],
			args:      args,
			env:       append(slices.Clone(h.cfg.Env), clockFileEnv+"="+clock),
			logPath:   filepath.Join(h.dir, fmt.Sprintf("paymentsd-%d.log", i)),
			clockFile: clock,
		}
		h.instances = append(h.instances, p)
		p.supervise()
	}
	if h.cfg.Store == StorePostgres && h.cfg.Proxies > 0 {
		fmt.Fprintf(h.cfg.Progress, "chaos: starting the upstream and %d idemproxy instances\n", h.cfg.Proxies)
		if err := h.deployProxies(ctx, bin); err != nil {
			return err
		}
	}
	return h.waitReady(ctx)
}

// waitReady waits until processord and every instance answer /healthz.
func (h *harness) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for _, p := range append(append([]*process{h.processor}, h.instances...), h.proxies...) {
		if err := p.waitReady(ctx, h.client); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	return nil
}

// close stops every process the harness started and removes the cluster.
func (h *harness) close() {
	var wg sync.WaitGroup
	for _, p := range append(h.instances, h.proxies...) {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	if h.processor != nil {
		h.processor.stop()
	}
	if h.queue != nil {
		h.queue.stop()
	}
	if h.receiver != nil {
		h.receiver.close()
	}
	if h.upstream != nil {
		h.upstream.close()
	}
	if h.proxy != nil {
		h.proxy.Close()
	}
	if h.net != nil {
		h.net.close()
	}
	for _, c := range append(h.retired, h.standby, h.cluster) {
		if c != nil {
			c.Close()
		}
	}
	if h.mariadb != nil {
		h.mariadb.Close()
	}
	if h.client != nil {
		h.client.CloseIdleConnections()
	}
}

// dbServer is the throwaway database server of a run, which the
// harness crashes and starts again.
type dbServer interface {
	// Crash stops the server with no shutdown: PostgreSQL as pg_ctl stop
	// -m immediate does, mariadbd with SIGKILL.
	Crash() error
	// Start starts it again on the same port and data.
	Start(ctx context.Context) error
}

// dbServer returns the run's database server: the MariaDB on StoreMySQL,
// else the PostgreSQL primary. Call it with dbMu held, which failovers
// hold while they change the primary.
func (h *harness) dbServer() dbServer {
	if h.mariadb != nil {
		return h.mariadb
	}
	return h.cluster
}

// Build compiles the binaries of a run from the module at src into dir,
// the three at once: paymentsd with tags and chaosclock, which lets the
// harness skew an instance's clock (ClockSkew), idemproxy with tags, and
// processord. Runs whose Config.BinDir is dir, with tags as their
// BuildTags, build nothing.
func Build(ctx context.Context, src, dir, tags string) error {
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, b := range []struct{ name, tags string }{
		{"paymentsd", strings.TrimPrefix(tags+",chaosclock", ",")},
		{"idemproxy", tags},
		{"processord", ""},
	} {
		wg.Go(func() { _, errs[i] = build(ctx, src, dir, b.name, b.tags) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// build compiles ./cmd/name of the module at src into dir.
func build(ctx context.Context, src, dir, name, tags string) (string, error) {
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, "./cmd/"+name)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build ./cmd/%s: %v\n%s", name, err, b)
	}
	return out, nil
}

// ModuleDir returns the root of the checkout that holds dir, where
// cmd/paymentsd is built from: the directory of its go.work, or of the
// first go.mod above dir whose directory has cmd/paymentsd.
func ModuleDir(dir string) (string, error) {
	for _, v := range []string{"GOWORK", "GOMOD"} {
		cmd := exec.Command("go", "env", v)
		cmd.Dir = dir
		b, err := cmd.Output()
		file := strings.TrimSpace(string(b))
		if err != nil || file == "" || file == "off" || file == os.DevNull {
			continue
		}
		for root := filepath.Dir(file); ; root = filepath.Dir(root) {
			if _, err := os.Stat(filepath.Join(root, "cmd", "paymentsd")); err == nil {
				return root, nil
			}
			if filepath.Dir(root) == root {
				break
			}
		}
	}
	return "", fmt.Errorf("chaos: %s is not inside a checkout of idem (no cmd/paymentsd above it)", dir)
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago. The listeners are all open at once, so the ports differ.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("chaos: pick a free port: %w", err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// openDB opens a small pool on the run's database, bypassing the proxy:
// PostgreSQL through pgx's database/sql driver, or paymentsd's SQLite file
// read-only.
func (h *harness) openDB(ctx context.Context) (*sql.DB, error) {
	var db *sql.DB
	var err error
	if path, ok := strings.CutPrefix(h.dbURL, "sqlite:"); ok {
		db, err = sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	} else if strings.HasPrefix(h.dbURL, "mysql:") {
		var dsn string
		if dsn, err = database.MySQLDSN(h.dbURL); err == nil {
			db, err = sql.Open("mysql", dsn)
		}
	} else {
		db, err = sql.Open("pgx", h.dbURL)
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: open the database: %w", err)
	}
	db.SetMaxOpenConns(4)
	return db, nil
}
