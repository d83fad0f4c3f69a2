package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"
)

// bankReport is what the checker found of the ledger.
type bankReport struct {
	Transfers         int // transfer operations
	Applied           int // acknowledged transfers, each found once
	InsufficientFunds int // transfers answered 402 insufficient-funds
	MovedOn402        int // of those, the ones with a stored transfer
	Samples           int
	TotalOK           bool
	// SumOK is whether the balances summed to the opening total at every
	// sample and at the end; TotalOK also requires every account right.
	SumOK bool
	// Accounts are the accounts whose balance breaks an invariant,
	// tenant/id and why, sorted.
	Accounts []string
}

// checkBank audits the ledger: the sum of the balances is the opening sum
// at the end and at every sample; every account's balance is its opening
// plus what the stored transfers brought and minus what they took, and
// never negative, at the end or at a sample (the keys of the transfers
// that overdrew it are named: overdrafts); every acknowledged transfer is
// stored once with the
// acknowledged accounts and amount, its key completed with the
// acknowledged answer, and every 2xx of it byte-identical; a transfer
// answered 402 insufficient-funds moved nothing; no transfer is stored
// that no operation sent.
//
// It returns the ids of the stored transfers, whose events the receiver may
// have.
func (h *harness) checkBank(ctx context.Context, pool *sql.DB, r *Report, keys map[scopeKey]*dbState) (map[string]bool, error) {
	b := h.bank
	stored := map[scopeKey][]transfer{}
	in, out := map[string]int64{}, map[string]int64{}
	rows, err := pool.QueryContext(ctx, `SELECT client_id, idempotency_key, id, from_account, to_account, amount FROM transfers`)
	if err != nil {
		return nil, fmt.Errorf("chaos: read transfers: %w", err)
	}
	var k scopeKey
	var t transfer
	if err := forEachRow(rows, []any{&k.client, &k.key, &t.ID, &t.From, &t.To, &t.Amount}, func() {
		stored[k] = append(stored[k], t)
		out[t.From] += t.Amount
		in[t.To] += t.Amount
	}); err != nil {
		return nil, fmt.Errorf("chaos: read transfers: %w", err)
	}
	balances := map[string]int64{}
	rows, err = pool.QueryContext(ctx, `SELECT id, balance FROM accounts`)
	if err != nil {
		return nil, fmt.Errorf("chaos: read accounts: %w", err)
	}
	var id string
	var bal int64
	if err := forEachRow(rows, []any{&id, &bal}, func() { balances[id] = bal }); err != nil {
		return nil, fmt.Errorf("chaos: read accounts: %w", err)
	}

	rep := &bankReport{Samples: int(b.samples.Load()), TotalOK: true}
	tenantOf := map[string]string{}
	for t, ids := range b.accounts {
		for _, id := range ids {
			tenantOf[id] = t
		}
	}
	// wrong records an account whose balance breaks an invariant, as a
	// stray line and among the offending accounts.
	wrong := func(id, why string) {
		rep.TotalOK = false
		r.add(vBank, nil, "")
		r.strays = append(r.strays, "account "+id+" "+why)
		rep.Accounts = append(rep.Accounts, tenantOf[id]+"/"+id+" "+why)
	}
	negative := map[string]bool{}
	b.mu.Lock()
	defer b.mu.Unlock()
	var sum int64
	for id, opening := range b.opening {
		got, ok := balances[id]
		sum += got
		switch {
		case !ok:
			wrong(id, "is missing")
		case got < 0:
			negative[id] = true
			wrong(id, fmt.Sprintf("has a negative balance %d", got))
		case b.lowest[id] < 0:
			negative[id] = true
			wrong(id, fmt.Sprintf("was sampled at a negative balance %d while the traffic ran", b.lowest[id]))
		case got != opening+in[id]-out[id]:
			wrong(id, fmt.Sprintf("holds %d, but its opening %d and its stored transfers make %d", got, opening, opening+in[id]-out[id]))
		}
	}
	sort.Strings(rep.Accounts)
	rep.SumOK = sum == b.total && b.badSamples.Load() == 0
	if sum != b.total {
		rep.TotalOK = false
		r.add(vBank, nil, "")
		r.strays = append(r.strays, fmt.Sprintf("the balances sum to %d at the end, want %d", sum, b.total))
	}
	if n := b.badSamples.Load(); n > 0 {
		rep.TotalOK = false
		for _, why := range b.bad {
			r.add(vBank, nil, "")
			r.strays = append(r.strays, why)
		}
	}

	sent := map[scopeKey]bool{}
	for _, op := range h.history.Ops() {
		if op.Kind != kindTransfer {
			continue
		}
		rep.Transfers++
		k := scopeKey{op.Client, op.Key}
		sent[k] = true
		rows := stored[k]
		r.rows[op] = &dbState{KeyStatus: keys[k].status(), KeyResponse: keys[k].response()}
		attempts, final := op.snapshot()
		for _, a := range attempts {
			if a.Status >= 500 && !h.documented5xx(a.Problem) {
				r.add(v5xx, op, fmt.Sprintf("instance %d answered %d %s", a.Instance, a.Status, a.Problem))
			}
		}
		if len(rows) > 1 {
			r.add(vDuplicated, op, fmt.Sprintf("%d transfers for one key", len(rows)))
		}
		switch {
		case final == nil:
			r.add(vUnanswered, op, "no final answer after settling")
		case final.Status == 402:
			rep.InsufficientFunds++
			if final.Problem != "insufficient-funds" {
				r.add(vLost, op, "a 402 other than insufficient-funds: "+final.Problem)
			}
			if len(rows) > 0 {
				rep.MovedOn402++
				r.add(vLost, op, "answered 402 insufficient-funds, but the transfer "+rows[0].ID+" moved money")
			}
		case final.Status == 400:
			// The harness's request is wrong, not the service: a run whose
			// transfers are refused checks nothing of the ledger.
			return nil, fmt.Errorf("chaos: transfer %s/%s was refused as bad input: %s", op.Client, op.Key, final.Answer)
		case !final.ok():
			if len(rows) > 0 {
				r.add(vLost, op, fmt.Sprintf("answered %d, but the transfer %s moved money", final.Status, rows[0].ID))
			}
		}
		var first *Attempt
		for _, a := range attempts {
			if !a.ok() {
				continue
			}
			if first == nil {
				first = a
			} else if a.AnswerSHA != first.AnswerSHA {
				r.add(vMismatch, op, fmt.Sprintf("instance %d answered a 2xx that differs from the first", a.Instance))
			}
		}
		if first == nil {
			continue
		}
		acked, err := parseTransfer([]byte(first.Answer))
		switch {
		case err != nil || acked.From != op.From || acked.To != op.To || acked.Amount != op.Amount:
			r.add(vCross, op, "the acknowledged answer is not this request's transfer")
		case len(rows) == 0 || rows[0] != acked:
			r.add(vLost, op, "the acknowledged transfer "+acked.ID+" is not in the database as acknowledged")
		case keys[k].status() != "completed":
			r.add(vLost, op, "the acknowledged key is "+orNone(keys[k].status()))
		case digest([]byte(keys[k].response())) != first.AnswerSHA:
			r.add(vMismatch, op, "the stored response differs from the acknowledged one")
		default:
			rep.Applied++
		}
	}
	for k, rows := range stored {
		if !sent[k] {
			r.add(vUnknown, nil, "")
			r.strays = append(r.strays, fmt.Sprintf("%d transfer(s) of %s/%s that no operation sent", len(rows), k.client, k.key))
		}
	}
	if len(negative) > 0 {
		r.overdrafts(b, negative, stored)
	}
	r.bank = rep
	ids := map[string]bool{}
	for _, rows := range stored {
		for _, t := range rows {
			ids[t.ID] = true
		}
	}
	return ids, nil
}

// overdrafts adds a violation to each transfer operation that took an
// account of negative below zero. The database does not say in which
// order the transfers committed: the account's stored transfers are
// replayed from its opening balance in the order of their operations'
// final answers, which the transaction's commit precedes (those without
// one last, by key), and each debit that leaves the balance negative
// offends.
func (r *Report) overdrafts(b *bank, negative map[string]bool, stored map[scopeKey][]transfer) {
	type entry struct {
		op       *Op
		answered time.Time // its final answer's; zero: none
		t        transfer
	}
	var entries []entry
	for op := range r.rows {
		if op.Kind != kindTransfer {
			continue
		}
		rows := stored[scopeKey{op.Client, op.Key}]
		if len(rows) == 0 || !negative[rows[0].From] && !negative[rows[0].To] {
			continue
		}
		e := entry{op: op, t: rows[0]}
		if _, final := op.snapshot(); final != nil {
			e.answered = final.Answered
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if a.answered.IsZero() != b.answered.IsZero() {
			return !a.answered.IsZero()
		}
		if !a.answered.Equal(b.answered) {
			return a.answered.Before(b.answered)
		}
		return a.op.Key < b.op.Key
	})
	balance := map[string]int64{}
	for id := range negative {
		balance[id] = b.opening[id]
	}
	for _, e := range entries {
		if negative[e.t.To] {
			balance[e.t.To] += e.t.Amount
		}
		if !negative[e.t.From] {
			continue
		}
		balance[e.t.From] -= e.t.Amount
		if bal := balance[e.t.From]; bal < 0 {
			r.add(vBank, e.op, fmt.Sprintf("the transfer %s took %d from account %s and left it at %d (its stored transfers replayed in the order of their final answers)",
				e.t.ID, e.t.Amount, e.t.From, bal))
		}
	}
}

func (s *dbState) status() string {
	if s == nil {
		return ""
	}
	return s.KeyStatus
}

func (s *dbState) response() string {
	if s == nil {
		return ""
	}
	return s.KeyResponse
}

// quoteList returns ids as a list of SQL string literals; the ids are the
// service's, and quoted all the same.
func quoteList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = "'" + strings.ReplaceAll(id, "'", "''") + "'"
	}
	return strings.Join(q, ",")
}
