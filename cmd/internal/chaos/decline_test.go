package chaos

import "testing"

// TestCheckDecline feeds the decline checker a declined payment kept
// right, and each way of getting one wrong.
func TestCheckDecline(t *testing.T) {
	t.Parallel()
	const body = `{"type":"/problems/payment-declined","code":"payment-declined","status":402}`
	answer := func(status int, problem, body string) *Attempt {
		return &Attempt{Status: status, Problem: problem, Answer: body, AnswerSHA: digest([]byte(body))}
	}
	good := func() *dbState {
		return &dbState{
			Payments: []payment{{ID: "pay_1", Amount: 502}}, PaymentStatus: []string{"declined"},
			KeyStatus: "completed", KeyResponse: body, Declines: 1,
		}
	}
	for _, tt := range []struct {
		name     string
		state    func(*dbState)
		attempts []*Attempt
		want     string // the violation kind, "" for none
	}{
		{name: "KeptRight", want: ""},
		{name: "Charged", state: func(s *dbState) { s.Charges = 1 }, want: vDuplicated},
		{name: "TwoPayments", state: func(s *dbState) {
			s.Payments = append(s.Payments, payment{ID: "pay_2"})
			s.PaymentStatus = append(s.PaymentStatus, "declined")
		}, want: vDuplicated},
		{name: "RecordedSucceeded", state: func(s *dbState) { s.PaymentStatus[0] = "succeeded" }, want: vLost},
		{name: "Acknowledged", attempts: []*Attempt{answer(201, "", `{"id":"pay_1"}`)}, want: vLost},
		{name: "ReplayDiffers", attempts: []*Attempt{answer(402, "payment-declined", body+" ")}, want: vMismatch},
		{name: "StoredDiffers", state: func(s *dbState) { s.KeyResponse = "{}" }, want: vMismatch},
		{name: "KeyStarted", state: func(s *dbState) { s.KeyStatus = "started" }, want: vLost},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := good()
			if tt.state != nil {
				tt.state(s)
			}
			first := answer(402, "payment-declined", body)
			attempts := append([]*Attempt{first}, tt.attempts...)
			r := &Report{counts: map[string]int{}, reasons: map[*Op][]string{}, rows: map[*Op]*dbState{}}
			op := &Op{ID: 1, Client: "alice", Key: "k", Amount: 502}
			r.checkDecline(op, s, attempts, first)
			switch {
			case tt.want == "" && r.violations() != 0:
				t.Errorf("violations %v, want none: %q", r.counts, r.reasons[op])
			case tt.want != "" && r.counts[tt.want] == 0:
				t.Errorf("violations %v, want %s", r.counts, tt.want)
			}
		})
	}
}
