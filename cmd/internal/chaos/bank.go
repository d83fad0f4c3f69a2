package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The ledger's operations, besides payments.
const (
	kindAccount  = "account"
	kindTransfer = "transfer"

	accountsPath  = "/v1/accounts"
	transfersPath = "/v1/transfers"
)

// Bank sizing: each tenant gets bankAccounts accounts of bankOpening
// (minor units) each, before the traffic starts; transfers move up to
// transferMax between two accounts of one tenant, so that a few find too
// little money and are answered 402 insufficient-funds.
const (
	bankAccounts = 4
	bankOpening  = 100_000
	transferMax  = 60_000
	// bankSampleEvery is how often the sampler sums the balances, in a
	// read-only transaction, while the traffic runs.
	bankSampleEvery = 500 * time.Millisecond
)

// bank is the ledger's state the harness set up: every account of every
// tenant, with its opening balance.
type bank struct {
	accounts map[string][]string // tenant -> account ids
	opening  map[string]int64    // account id -> opening balance
	total    int64               // the sum of the opening balances

	samples    atomic.Int64 // sums read while the traffic ran
	badSamples atomic.Int64 // sums that were not total
	mu         sync.Mutex
	bad        []string         // what each bad sample read
	lowest     map[string]int64 // the lowest negative balance sampled, by account
}

// Transfer moves money between two accounts of the worker's tenant through
// POST /v1/transfers, in atomic mode: as a duplicate storm across instances
// (as Storm does for payments) or as one request retried to a final answer.
type Transfer struct{}

func (Transfer) Name() string { return "transfer" }

func (Transfer) Run(ctx context.Context, w *Worker) {
	b := w.h.bank
	accts := b.accounts[w.Tenant.name]
	from := w.Rand.IntN(len(accts))
	to := (from + 1 + w.Rand.IntN(len(accts)-1)) % len(accts)
	amount := 1 + w.Rand.Int64N(transferMax)
	op := w.h.history.add(&Op{
		Workload: "transfer", Client: w.Tenant.name, Key: w.newKey(), Kind: kindTransfer,
		From: accts[from], To: accts[to], Amount: amount, token: w.Tenant.token,
	}, transferBody(accts[from], accts[to], amount))
	copies := 1
	if w.Rand.IntN(2) == 0 {
		copies = 2 + w.Rand.IntN(4) // a duplicate storm
	}
	var wg sync.WaitGroup
	for range copies {
		seed := w.Rand.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.h.drive(ctx, op, "traffic", rand.New(rand.NewPCG(seed, 2)))
		}()
	}
	wg.Wait()
}

func transferBody(from, to string, amount int64) []byte {
	return fmt.Appendf(nil, `{"from":%q,"to":%q,"amount":%d}`, from, to, amount)
}

// transfer and account are the parts of the ledger's answers the checker
// reads.
type transfer struct {
	ID     string `json:"id"`
	From   string `json:"from"`
	To     string `json:"to"`
	Amount int64  `json:"amount"`
}

type account struct {
	ID      string `json:"id"`
	Balance int64  `json:"balance"`
}

func parseTransfer(body []byte) (transfer, error) {
	var t transfer
	err := json.Unmarshal(body, &t)
	if err == nil && t.ID == "" {
		err = fmt.Errorf("no transfer id")
	}
	return t, err
}

// usesBank reports whether the run has transfers.
func (c Config) usesBank() bool {
	if c.QueueCommands > 0 {
		return true
	}
	for _, w := range c.Workloads {
		switch w.Workload.(type) {
		case Transfer, QueuedTransfer:
			return true
		}
	}
	return false
}

// openBank creates the accounts of every tenant, before the traffic and
// its faults start, each through POST /v1/accounts with a key of its own,
// retried to its 201.
func (h *harness) openBank(ctx context.Context) error {
	b := &bank{accounts: map[string][]string{}, opening: map[string]int64{}, lowest: map[string]int64{}}
	for ti, t := range tenants {
		for i := range bankAccounts {
			op := h.history.add(&Op{
				Workload: "account", Client: t.name, Key: fmt.Sprintf("chaos-%d-account-%s-%d", h.cfg.Seed, t.name, i),
				Kind: kindAccount, Amount: bankOpening, token: t.token,
			}, fmt.Appendf(nil, `{"currency":"usd","balance":%d}`, bankOpening))
			a := h.driveN(ctx, op, "setup", rand.New(rand.NewPCG(h.cfg.Seed, uint64(100*ti+i))), settleAttempts)
			if a == nil || !a.ok() {
				return fmt.Errorf("chaos: open the bank: account %d of %s: %s", i, t.name, describe(a))
			}
			var acct account
			if err := json.Unmarshal([]byte(a.Answer), &acct); err != nil || acct.ID == "" || acct.Balance != bankOpening {
				return fmt.Errorf("chaos: open the bank: account %d of %s answered %s", i, t.name, a.Answer)
			}
			b.accounts[t.name] = append(b.accounts[t.name], acct.ID)
			b.opening[acct.ID] = bankOpening
			b.total += bankOpening
		}
	}
	h.bank = b
	return nil
}

func describe(a *Attempt) string {
	switch {
	case a == nil:
		return "no answer"
	case a.Status == 0:
		return a.Error
	}
	return fmt.Sprintf("%d %s", a.Status, a.Answer)
}

// sampleBank sums the balances of the bank's accounts every
// bankSampleEvery, in a read-only transaction, until stop is closed: the
// sum must never change, whatever moves. A read that fails (PostgreSQL is
// being restarted) is skipped.
func (h *harness) sampleBank(ctx context.Context, stop <-chan struct{}) {
	pool, err := h.openDB(ctx)
	if err != nil {
		return
	}
	defer pool.Close()
	ids := make([]string, 0, len(h.bank.opening))
	for id := range h.bank.opening {
		ids = append(ids, id)
	}
	tick := time.NewTicker(bankSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sum, n, err := bankSum(ctx, pool, ids)
		if err != nil {
			continue
		}
		if neg, err := negativeBalances(ctx, pool, ids); err == nil && len(neg) > 0 {
			h.bank.mu.Lock()
			for id, bal := range neg {
				if low, ok := h.bank.lowest[id]; !ok || bal < low {
					h.bank.lowest[id] = bal
				}
			}
			h.bank.mu.Unlock()
		}
		h.bank.samples.Add(1)
		if sum != h.bank.total || n != len(ids) {
			h.bank.badSamples.Add(1)
			h.bank.mu.Lock()
			h.bank.bad = append(h.bank.bad, fmt.Sprintf("sampled %d over %d accounts, want %d over %d", sum, n, h.bank.total, len(ids)))
			h.bank.mu.Unlock()
		}
	}
}

// bankSum reads the sum of the balances of ids, and how many of them
// exist, in one read-only transaction.
func bankSum(ctx context.Context, pool *sql.DB, ids []string) (sum int64, n int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tx, err := pool.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback()
	err = tx.QueryRowContext(ctx, `SELECT coalesce(sum(balance), 0), count(*) FROM accounts WHERE id IN (`+quoteList(ids)+`)`).Scan(&sum, &n)
	return sum, n, err
}

// negativeBalances reads the accounts of ids whose balance is negative,
// in one read-only transaction.
func negativeBalances(ctx context.Context, pool *sql.DB, ids []string) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tx, err := pool.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, balance FROM accounts WHERE balance < 0 AND id IN (`+quoteList(ids)+`)`)
	if err != nil {
		return nil, err
	}
	neg := map[string]int64{}
	var id string
	var bal int64
	err = forEachRow(rows, []any{&id, &bal}, func() { neg[id] = bal })
	return neg, err
}
