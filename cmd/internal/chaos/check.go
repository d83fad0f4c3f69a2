package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL for database/sql
	_ "modernc.org/sqlite"             // processord's charges, paymentsd on SQLite
)

// Violation kinds, as the summary counts them.
const (
	vLost       = "lost"
	vDuplicated = "duplicated"
	vMismatch   = "mismatched_replays"
	vCross      = "cross_tenant"
	vStuck      = "stuck_keys"
	v5xx        = "unexpected_5xx"
	vUnanswered = "unanswered"
	vReuse      = "reuse_accepted"
	vUnknown    = "unknown_payments"

	vBank = "bank"

	vEventMissing = "events_missing"
	vEventUnknown = "events_unknown"
	vEventInvalid = "events_invalid_signature"
)

// Report is what the checker found: for each violation kind, how many
// operations (or, for strays, keys) show it, and why.
type Report struct {
	counts  map[string]int
	reasons map[*Op][]string
	rows    map[*Op]*dbState
	// strays are payments and started keys that no operation of the
	// history explains, events for payments that do not exist, and
	// deliveries the receiver rejected.
	strays []string
	// events is what the webhook receiver saw.
	events receiverStats
	// bank is what the checker found of the ledger; nil without transfers.
	bank *bankReport
	// proxy is what the checker found of the proxy workload.
	proxy proxyCounts
}

// dbState is what the database holds for one (client, key).
type dbState struct {
	Payments []payment `json:"payments"`
	// PaymentStatus holds the status of each of Payments.
	PaymentStatus []string `json:"payment_status,omitempty"`
	KeyStatus     string   `json:"key_status,omitempty"`
	KeyResponse   string   `json:"key_response,omitempty"`
	// Charges counts processord's charges of the operation's customer;
	// Declines its declined attempts.
	Charges  int `json:"charges"`
	Declines int `json:"declines,omitempty"`
}

// add records a violation of op; each kind counts an operation once.
func (r *Report) add(kind string, op *Op, why string) {
	if op == nil {
		r.counts[kind]++
		return
	}
	prefix := kind + ": "
	if !slices.ContainsFunc(r.reasons[op], func(s string) bool { return strings.HasPrefix(s, prefix) }) {
		r.counts[kind]++
	}
	r.reasons[op] = append(r.reasons[op], prefix+why)
}

func (r *Report) violations() int {
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

type scopeKey struct{ client, key string }

// check audits the history against PostgreSQL and processord's charges:
// at most one payment and one charge per key, every acknowledged payment
// stored with the acknowledged body, every 2xx of an operation
// byte-identical, no answer with another request's payment, no key left
// started, no 5xx but the documented 503s, every operation answered, and
// every reuse with a changed body refused; and, from the webhook receiver,
// an event delivered for every acknowledged payment, none for a payment
// that does not exist, and no delivery with an invalid signature.
func (h *harness) check(ctx context.Context) (*Report, error) {
	pool, err := h.openDB(ctx)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	state := map[scopeKey]*dbState{}
	get := func(k scopeKey) *dbState {
		if state[k] == nil {
			state[k] = &dbState{}
		}
		return state[k]
	}
	rows, err := pool.QueryContext(ctx, `SELECT client_id, idempotency_key, id, amount, currency, customer, status FROM payments ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("chaos: read payments: %w", err)
	}
	for rows.Next() {
		var k scopeKey
		var p payment
		var status string
		if err := rows.Scan(&k.client, &k.key, &p.ID, &p.Amount, &p.Currency, &p.Customer, &status); err != nil {
			return nil, fmt.Errorf("chaos: read payments: %w", err)
		}
		s := get(k)
		s.Payments = append(s.Payments, p)
		s.PaymentStatus = append(s.PaymentStatus, status)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("chaos: read payments: %w", err)
	}
	var k scopeKey
	var status string
	var body []byte
	keyRows, err := pool.QueryContext(ctx, `SELECT client_id, idempotency_key, status, response_body FROM idempotency_keys`)
	if err != nil {
		return nil, fmt.Errorf("chaos: read keys: %w", err)
	}
	err = forEachRow(keyRows, []any{&k.client, &k.key, &status, &body}, func() {
		s := get(k)
		s.KeyStatus, s.KeyResponse = status, string(body)
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: read keys: %w", err)
	}
	charges, err := h.charges(ctx)
	if err != nil {
		return nil, err
	}

	r := &Report{counts: map[string]int{}, reasons: map[*Op][]string{}, rows: map[*Op]*dbState{}, events: h.receiver.stats()}
	seen := map[scopeKey]bool{}
	for _, op := range h.history.Ops() {
		if op.Kind != "" {
			continue // the ledger's: checkBank
		}
		k := scopeKey{op.Client, op.Key}
		s := get(k)
		s.Charges, s.Declines = charges[op.Customer].charged, charges[op.Customer].declined
		r.rows[op] = s
		attempts, final := op.snapshot()
		for _, a := range attempts {
			if a.Status >= 500 && !h.documented5xx(a.Problem) {
				r.add(v5xx, op, fmt.Sprintf("instance %d answered %d %s", a.Instance, a.Status, a.Problem))
			}
		}
		if final == nil {
			r.add(vUnanswered, op, "no final answer after settling")
		}
		if op.ReuseOf != 0 {
			if final != nil && final.Status != 422 {
				r.add(vReuse, op, fmt.Sprintf("a changed body got %d, want 422", final.Status))
			}
			continue
		}
		seen[k] = true
		if declined(op.Amount) {
			r.checkDecline(op, s, attempts, final)
			continue
		}
		if len(s.Payments) > 1 {
			r.add(vDuplicated, op, fmt.Sprintf("%d payments for one key", len(s.Payments)))
		}
		if s.Charges > 1 {
			r.add(vDuplicated, op, fmt.Sprintf("%d processor charges for one key", s.Charges))
		}
		var first *Attempt
		for _, a := range attempts {
			if !a.ok() {
				continue
			}
			if p, err := parsePayment([]byte(a.Answer)); err != nil || p.Customer != op.Customer || p.Amount != op.Amount {
				r.add(vCross, op, fmt.Sprintf("instance %d answered a payment of another request", a.Instance))
			}
			if first == nil {
				first = a
			} else if a.AnswerSHA != first.AnswerSHA {
				r.add(vMismatch, op, fmt.Sprintf("instance %d answered a 2xx that differs from the first", a.Instance))
			}
		}
		if first == nil {
			if len(s.Payments) > 0 && final != nil {
				// A final answer other than 2xx with a payment behind it:
				// the client was told something false.
				r.add(vLost, op, fmt.Sprintf("answered %d but a payment exists", final.Status))
			}
			continue
		}
		acked, _ := parsePayment([]byte(first.Answer))
		found := false
		for _, p := range s.Payments {
			found = found || p == acked
		}
		switch {
		case !found:
			r.add(vLost, op, "the acknowledged payment "+acked.ID+" is not in the database")
		case s.KeyStatus != "completed":
			r.add(vLost, op, "the acknowledged key is "+orNone(s.KeyStatus))
		case digest([]byte(s.KeyResponse)) != first.AnswerSHA:
			r.add(vMismatch, op, "the stored response differs from the acknowledged one")
		}
	}
	for k, s := range state {
		if s.KeyStatus == "started" {
			op := r.opFor(k)
			r.add(vStuck, op, "key left started")
			if op == nil {
				r.strays = append(r.strays, fmt.Sprintf("started key %s/%s", k.client, k.key))
			}
		}
		if len(s.Payments) > 0 && !seen[k] {
			r.add(vUnknown, nil, "")
			r.strays = append(r.strays, fmt.Sprintf("payment of %s/%s that no operation sent", k.client, k.key))
		}
	}
	stored := map[string]bool{}
	for _, s := range state {
		for _, p := range s.Payments {
			stored[p.ID] = true
		}
	}
	if h.upstream != nil {
		h.checkProxy(r)
	}
	if h.bank != nil {
		transfers, err := h.checkBank(ctx, pool, r, state)
		if err != nil {
			return nil, err
		}
		for id := range transfers {
			stored[id] = true
		}
	}
	r.checkEvents(h.history.ackedObjects(), stored)
	return r, nil
}

// checkEvents audits the receiver: every acknowledged payment's and
// transfer's event delivered, every delivered event about an object in the
// database (stored), every delivery signed. An event delivered more than
// once is at-least-once delivery, not a violation; the summary counts them.
func (r *Report) checkEvents(acked map[string]*Op, stored map[string]bool) {
	for id, op := range acked {
		if len(r.events.ByPayment[id]) == 0 {
			r.add(vEventMissing, op, "no event of the acknowledged object "+id+" was delivered")
		}
	}
	for id, events := range r.events.ByPayment {
		if stored[id] {
			continue
		}
		for _, e := range events {
			r.add(vEventUnknown, nil, "")
			r.strays = append(r.strays, fmt.Sprintf("event %s (%s) delivered for %s, which does not exist", e.ID, e.Type, id))
		}
	}
	for _, why := range r.events.Invalid {
		r.add(vEventInvalid, nil, "")
		r.strays = append(r.strays, "rejected webhook "+why)
	}
}

// opFor returns the first payment operation of k, or nil.
func (r *Report) opFor(k scopeKey) *Op {
	var best *Op
	for op := range r.rows {
		if op.Client == k.client && op.Key == k.key && op.ReuseOf == 0 && op.Kind == "" && (best == nil || op.ID < best.ID) {
			best = op
		}
	}
	return best
}

// checkDecline audits a payment of an amount that processord declines: its
// final answer is 402 payment-declined, every 402 of it byte-identical and
// stored with its key; the database holds one payment for it, declined,
// and processord charged nothing (one declined attempt at most).
func (r *Report) checkDecline(op *Op, s *dbState, attempts []*Attempt, final *Attempt) {
	if len(s.Payments) > 1 {
		r.add(vDuplicated, op, fmt.Sprintf("%d payments for one key", len(s.Payments)))
	}
	if s.Charges > 0 {
		r.add(vDuplicated, op, fmt.Sprintf("a declined payment charged %d times", s.Charges))
	}
	if s.Declines > 1 {
		r.add(vDuplicated, op, fmt.Sprintf("%d declined attempts at one charge", s.Declines))
	}
	var first *Attempt
	for _, a := range attempts {
		switch {
		case a.ok():
			r.add(vLost, op, fmt.Sprintf("instance %d acknowledged a payment that the processor declines", a.Instance))
		case a.Status == 402 && first == nil:
			first = a
		case a.Status == 402 && a.AnswerSHA != first.AnswerSHA:
			r.add(vMismatch, op, fmt.Sprintf("instance %d answered a 402 that differs from the first", a.Instance))
		}
	}
	switch {
	case final == nil:
		return // unanswered, reported already
	case final.Status != 402 || final.Problem != "payment-declined":
		r.add(vLost, op, fmt.Sprintf("a declined payment ended %d %s, want 402 payment-declined", final.Status, final.Problem))
	case len(s.Payments) != 1 || s.PaymentStatus[0] != "declined":
		r.add(vLost, op, fmt.Sprintf("answered 402 payment-declined, but the database holds %d payments (%v)", len(s.Payments), s.PaymentStatus))
	case s.KeyStatus != "completed":
		r.add(vLost, op, "the declined payment's key is "+orNone(s.KeyStatus))
	case digest([]byte(s.KeyResponse)) != first.AnswerSHA:
		r.add(vMismatch, op, "the stored 402 differs from the one answered")
	}
}

// chargeCounts are processord's records of one customer: charges, and
// declined attempts.
type chargeCounts struct{ charged, declined int }

// charges counts processord's charges and declined attempts per customer;
// every payment operation has a customer of its own.
func (h *harness) charges(ctx context.Context) (map[string]chargeCounts, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(h.dir, "processord.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("chaos: open processord's database: %w", err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT customer, sum(outcome <> 'declined'), sum(outcome = 'declined') FROM charges GROUP BY customer`)
	if err != nil {
		return nil, fmt.Errorf("chaos: read charges: %w", err)
	}
	defer rows.Close()
	n := map[string]chargeCounts{}
	for rows.Next() {
		var c string
		var k chargeCounts
		if err := rows.Scan(&c, &k.charged, &k.declined); err != nil {
			return nil, fmt.Errorf("chaos: read charges: %w", err)
		}
		n[c] = k
	}
	return n, rows.Err()
}

// write writes the history of every offending operation to path, one JSON
// object a line, then the strays.
func (r *Report) write(path string) error {
	ops := make([]*Op, 0, len(r.reasons))
	for op := range r.reasons {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].ID < ops[j].ID })
	var b strings.Builder
	for _, op := range ops {
		line, err := op.marshal(r.reasons[op], r.rows[op])
		if err != nil {
			return fmt.Errorf("chaos: encode history: %w", err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	for _, s := range r.strays {
		fmt.Fprintf(&b, "{\"stray\":%q}\n", s)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("chaos: write violations: %w", err)
	}
	return nil
}

// offending returns the offending keys, client/key, sorted.
func (r *Report) offending() []string {
	set := map[string]bool{}
	for op := range r.reasons {
		set[op.Client+"/"+op.Key] = true
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func orNone(s string) string {
	if s == "" {
		return "missing"
	}
	return s
}

// forEachRow scans every row of rows into dest and calls fn after each,
// then closes rows.
func forEachRow(rows *sql.Rows, dest []any, fn func()) error {
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		fn()
	}
	return rows.Err()
}
