package payments_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/payments"
)

// retryKind says how a planned transfer's request is sent again.
type retryKind int

const (
	retryNone       retryKind = iota
	retryConcurrent           // a second request with the key, at the same time
	retryAfter                // a second request with the key, after the first answered
)

// transferOp is one logical transfer of the load: one key.
type transferOp struct {
	key      string
	from, to int // account indexes
	amount   int64
	retry    retryKind
	// reuse sends the key again, after the first answer, with another
	// amount: it must get 422.
	reuse bool
}

// opResult is what the requests of one transferOp got.
type opResult struct {
	answers []answer // the requests with the op's own body
	reused  []answer // the requests with a changed amount
	polls   int      // 409 answers (key in flight), sent again
}

// planTransfers plans n transfers among accounts accounts: 15 % retried at
// the same time, 15 % retried after the first answer, 5 % reused with
// another amount. Amounts go up to 2,000, against opening balances of
// 5,000, so that some transfers find too little money.
func planTransfers(n, accounts int) []transferOp {
	rng := rand.New(rand.NewPCG(14, 3))
	ops := make([]transferOp, n)
	for i := range ops {
		from := rng.IntN(accounts)
		to := (from + 1 + rng.IntN(accounts-1)) % accounts
		op := transferOp{key: fmt.Sprintf("tr-%05d", i), from: from, to: to, amount: 1 + rng.Int64N(2000)}
		switch r := rng.IntN(100); {
		case r < 15:
			op.retry = retryConcurrent
		case r < 30:
			op.retry = retryAfter
		case r < 35:
			op.reuse = true
		}
		ops[i] = op
	}
	return ops
}

// settle sends a request until it is not answered 409 (key in flight), as
// a client does, for up to a minute.
func (f *ledgerFixture) settle(token, key, body string, polls *int) (answer, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		a, err := f.send(http.MethodPost, "/v1/transfers", token, key, body)
		if err != nil || a.status != http.StatusConflict {
			return a, err
		}
		*polls++
		if time.Now().After(deadline) {
			return a, fmt.Errorf("key %s still in flight after a minute: %s", key, a.body)
		}
		time.Sleep(5 * time.Millisecond) // the first request is running: poll again
	}
}

// run sends op's requests and returns what they got.
func (f *ledgerFixture) run(op transferOp, ids []string) (opResult, error) {
	var res opResult
	body := transferBody(ids[op.from], ids[op.to], op.amount)
	var first answer
	var err error
	if op.retry != retryConcurrent {
		first, err = f.settle("sk_alice", op.key, body, &res.polls)
	} else {
		// The duplicate is sent while the first request runs (or queues);
		// both are settled before anything else is sent with the key.
		var dup answer
		var dupErr error
		var dupPolls int
		var wg sync.WaitGroup
		wg.Go(func() { dup, dupErr = f.settle("sk_alice", op.key, body, &dupPolls) })
		first, err = f.settle("sk_alice", op.key, body, &res.polls)
		wg.Wait()
		res.polls += dupPolls
		if dupErr != nil {
			return res, dupErr
		}
		res.answers = append(res.answers, dup)
	}
	if err != nil {
		return res, err
	}
	res.answers = append(res.answers, first)
	if op.retry == retryAfter {
		again, err := f.settle("sk_alice", op.key, body, &res.polls)
		if err != nil {
			return res, err
		}
		res.answers = append(res.answers, again)
	}
	if op.reuse {
		changed, err := f.settle("sk_alice", op.key, transferBody(ids[op.from], ids[op.to], op.amount+1), &res.polls)
		if err != nil {
			return res, err
		}
		res.reused = append(res.reused, changed)
	}
	return res, nil
}

// TestTransfersUnderConcurrentRetries runs 2,000 transfers among 10
// accounts from 20 concurrent clients, 30 % of them retried with the same
// key (half at the same time, half after the answer) and 5 % reusing their
// key with another amount. The money is conserved, no balance is negative,
// each key moves money at most once and every answer agrees with the
// ledger, a refused transfer's 402 is replayed as it was, and no answer is
// a 5xx.
func TestTransfersUnderConcurrentRetries(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const accounts, opening, clients = 10, 5_000, 20
			n := 2000
			if testing.Short() {
				n = 300
			}
			f := setupLedger(t, kind, ledgerOpts{})
			ids := make([]string, accounts)
			for i := range ids {
				ids[i] = f.openAccount(t, "sk_alice", fmt.Sprintf("acct-%d", i), "usd", opening).ID
			}
			ops := planTransfers(n, accounts)
			results := make([]opResult, len(ops))
			work := make(chan int)
			start := time.Now()
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for i := range work {
						res, err := f.run(ops[i], ids)
						if err != nil {
							t.Errorf("%s: %v", ops[i].key, err)
						}
						results[i] = res
					}
				})
			}
			for i := range ops {
				work <- i
			}
			close(work)
			wg.Wait()
			elapsed := time.Since(start)
			if t.Failed() {
				t.FailNow()
			}

			var requests, retried, replays, created, short, shortReplays, mismatches, polls, serverErrors int
			want := make([]int64, accounts)
			for i := range want {
				want[i] = opening
			}
			ctx := context.Background()
			for i, op := range ops {
				res := results[i]
				requests += len(res.answers) + len(res.reused) + res.polls
				retried += len(res.answers) - 1
				polls += res.polls
				executed := 0
				for _, a := range append(append([]answer{}, res.answers...), res.reused...) {
					if a.status >= 500 {
						serverErrors++
						t.Errorf("%s: %d %s", op.key, a.status, a.body)
					}
				}
				for _, a := range res.answers {
					if a.status != res.answers[0].status || a.body != res.answers[0].body {
						t.Errorf("%s: answers differ: %d %s and %d %s", op.key, res.answers[0].status, res.answers[0].body, a.status, a.body)
					}
					if a.replayed {
						replays++
						if a.status == http.StatusPaymentRequired {
							shortReplays++
						}
					} else {
						executed++
					}
				}
				if executed != 1 {
					t.Errorf("%s: %d of %d answers executed the transfer, want 1", op.key, executed, len(res.answers))
				}
				for _, a := range res.reused {
					if a.status != http.StatusUnprocessableEntity {
						t.Errorf("%s reused with another amount: %d %s, want 422", op.key, a.status, a.body)
					}
					mismatches++
				}
				rows, err := f.ledger.TransfersByKey(ctx, "alice", op.key)
				if err != nil {
					t.Fatal(err)
				}
				switch a := res.answers[0]; a.status {
				case http.StatusCreated:
					created++
					got := decode[payments.Transfer](t, []byte(a.body))
					if len(rows) != 1 {
						t.Errorf("%s: answered 201, and %d transfers hold the key, want 1", op.key, len(rows))
						continue
					}
					row := *rows[0]
					row.ClientID, row.IdempotencyKey = "", ""
					if got != row || got.From != ids[op.from] || got.To != ids[op.to] || got.Amount != op.amount {
						t.Errorf("%s: answered %+v, the ledger holds %+v", op.key, got, row)
					}
					want[op.from] -= op.amount
					want[op.to] += op.amount
				case http.StatusPaymentRequired:
					short++
					if p := decode[idem.Problem](t, []byte(a.body)); p.Code != "insufficient-funds" {
						t.Errorf("%s: 402 %+v, want insufficient-funds", op.key, p)
					}
					if len(rows) != 0 {
						t.Errorf("%s: answered 402, and %d transfers hold the key, want 0", op.key, len(rows))
					}
				default:
					t.Errorf("%s: %d %s, want 201 or 402", op.key, a.status, a.body)
				}
			}

			var sum int64
			for i, id := range ids {
				got := f.balance(t, "sk_alice", id)
				sum += got
				if got < 0 || got != want[i] {
					t.Errorf("account %d: balance %d, want %d, the opening plus the 201 answers", i, got, want[i])
				}
			}
			t.Logf("%s: %d transfers by %d clients in %v: %d requests, %d retries with the same key (%d replays), "+
				"%d moved money (201), %d insufficient funds (402; %d of its replays identical), %d keys reused with another amount (422), "+
				"%d answers 409 then sent again, %d conflict reruns, %d 5xx; balances sum to %d (opening %d)",
				kind, len(ops), clients, elapsed.Round(time.Millisecond), requests, retried, replays,
				created, short, shortReplays, mismatches, polls, f.reruns.n.Load(), serverErrors, sum, accounts*opening)
			if sum != accounts*opening {
				t.Errorf("balances sum to %d, want %d", sum, accounts*opening)
			}
			if short == 0 || created == 0 {
				t.Errorf("%d transfers moved money and %d found too little: the load must exercise both", created, short)
			}
		})
	}
}
