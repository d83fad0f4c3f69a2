package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconsume"
)

// TransfersPath is the path of POST /v1/transfers, under which transfer
// commands from a queue are fingerprinted and recorded too, so that a
// command and a request with the same key and client are one transfer.
const TransfersPath = "/v1/transfers"

// TransferConsumer returns the consumer of transfer commands taken from a
// queue, named name (the durable consumer or queue). A command's body is
// the JSON of POST /v1/transfers, its id is the idempotency key, and its
// client (idemconsume.Message.Client, which the adapter finds from the
// message's Authorization header, as over HTTP) is the scope: the same
// scope as the client's HTTP requests. So a command and a request that
// carry the same key for the same client are one transfer, applied once;
// whichever comes second gets the first one's answer.
//
// It applies a command with the ledger's rules, in the atomic mode, as
// POST /v1/transfers does: the money, the transfer, its event and the key
// commit in one transaction. A command that names no known client, or
// that the ledger refuses (a parameter, insufficient funds), is
// dead-lettered with the reason; a failure rolls back and the command is
// delivered again.
func (s *Service) TransferConsumer(name string, metrics idemconsume.Metrics) (*idemconsume.Consumer, error) {
	if s.cfg.Ledger == nil {
		return nil, errors.New("payments: the service has no ledger")
	}
	ic := s.cfg.Idem
	ic.ClientID, ic.Require, ic.Outcome = nil, nil, nil // the consumer's own
	ic.Mode = idem.ModeAtomic
	return idemconsume.New(s.cfg.Store, s.consumeTransfer, &idemconsume.Config{
		Name: name, Path: TransfersPath, Idem: &ic, Metrics: metrics,
	})
}

// consumeTransfer is the handler of TransferConsumer.
func (s *Service) consumeTransfer(ctx context.Context, m *idemconsume.Message) error {
	if m.Client == "" {
		return idemconsume.Reject("the command carries no Authorization field with a known bearer token")
	}
	w := &statusWriter{ResponseWriter: idemconsume.ResponseWriter(ctx)}
	s.applyTransfer(ctx, w, m.Client, m.ID, m.ContentType, m.Body)
	if w.status >= 500 {
		return fmt.Errorf("payments: transfer command failed with %d", w.status)
	}
	return nil
}

// statusWriter keeps the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}
