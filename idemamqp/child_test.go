package idemamqp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemamqp"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/child"
)

// childEnv names the role of a child process of the tests: the test binary
// started again, killed with SIGKILL by its parent.
const childEnv = "IDEMAMQP_TEST_CHILD"

// runChild runs a child's role until SIGTERM and returns its exit code.
// Its configuration comes in the environment: the database, the NATS
// server, the stream.
func runChild(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch role {
	case "consumer":
		err = runConsumerChild(ctx)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// proc is a child process and the reader of its output.
type proc struct {
	cmd  *exec.Cmd
	read chan struct{} // closed when its output is read to the end
}

// startChild starts the test binary as a child in role, with env added to
// its environment. Each line it prints goes to lines. The child dies with
// the test.
func startChild(t *testing.T, role string, env []string, lines func(string)) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	dieWithParent(cmd)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(cmd); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, read: make(chan struct{})}
	go func() {
		defer close(p.read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if lines != nil {
				lines(sc.Text())
			}
		}
		io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() { kill(p) })
	return p
}

// kill kills a child with SIGKILL, as a crash does, and waits for it and
// for the last of its output.
func kill(p *proc) {
	p.cmd.Process.Kill()
	<-p.read // before Wait, which closes the pipe
	p.cmd.Wait()
}

func openStore(ctx context.Context, url string) (*pgxpool.Pool, *idempg.Store, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, store, nil
}

func splitLine(line string) (string, string) {
	k, v, _ := strings.Cut(line, " ")
	return k, v
}

// bankSchema is the business tables of the kill tests: a ledger whose
// total never changes, and a row per applied command, without a unique
// constraint, so that a command applied twice shows.
const bankSchema = `
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts SELECT g, 1000000 FROM generate_series(0, 99) g;
CREATE TABLE applied (id text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
`

// bankTotal is the sum of the balances of bankSchema's accounts.
const bankTotal = 100 * 1000000

// transferCommand is a command of the kill tests.
type transferCommand struct {
	From   int   `json:"from"`
	To     int   `json:"to"`
	Amount int64 `json:"amount"`
}

// applyTransfer is the handler of the kill tests: it moves the amount and
// records the command, in the transaction that records its key.
func applyTransfer(ctx context.Context, m *idemconsume.Message) error {
	var cmd transferCommand
	if err := json.Unmarshal(m.Body, &cmd); err != nil {
		return idemconsume.Reject("not a transfer: " + err.Error())
	}
	tx, err := idempg.TxFromContext(ctx)
	if err != nil {
		return err
	}
	// In the order of the accounts' ids, so that two transfers never wait
	// for each other in turn.
	a, b := cmd.From, cmd.To
	da, db := -cmd.Amount, cmd.Amount
	if a > b {
		a, b, da, db = b, a, db, da
	}
	if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, a, da); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, b, db); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO applied (id) VALUES ($1)`, m.ID)
	return err
}

var printMu sync.Mutex

// runConsumerChild consumes the queue IDEM_TEST_QUEUE with applyTransfer
// until it is killed.
func runConsumerChild(ctx context.Context) error {
	pool, store, err := openStore(ctx, os.Getenv("IDEM_TEST_DB"))
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := idemconsume.New(store, applyTransfer, &idemconsume.Config{Name: "bank", Idem: &idem.Config{Logger: quiet}})
	if err != nil {
		return err
	}
	sub, err := idemamqp.NewSubscriber(c, idemamqp.DialURL(amqpURL()), &idemamqp.SubscriberConfig{
		Queue: os.Getenv("IDEM_TEST_QUEUE"), Prefetch: 8, ReconnectWait: 100 * time.Millisecond, Logger: quiet,
		Results: func(d idemamqp.Delivery) {
			if d.AckErr == nil && d.Result.Action == idemconsume.Ack {
				printMu.Lock()
				fmt.Println("acked", d.Result.Outcome)
				printMu.Unlock()
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return sub.Run(ctx)
}
