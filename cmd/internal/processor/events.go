package processor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/idemkit/idem/idemoutbox"
)

// Event types of the processor's webhooks, one per new charge.
const (
	EventChargeSucceeded = "charge.succeeded"
	EventChargeDeclined  = "charge.declined"
)

// enqueueChargeEvent writes the event of a new charge in the charge's
// transaction, when the processor sends events: the charge and its event
// commit together, so the event of a charge whose answer was lost (the
// LoseRate and TimeoutRate failures) still goes out, and tells the caller
// the outcome it missed. The event's data is the charge, whose id is the
// event's object.
func (p *processor) enqueueChargeEvent(ctx context.Context, c *Charge) error {
	if p.cfg.Events == nil {
		return nil
	}
	typ := EventChargeSucceeded
	if c.Outcome == OutcomeDeclined {
		typ = EventChargeDeclined
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("processor: encode charge event: %w", err)
	}
	_, err = idemoutbox.Enqueue(ctx, p.cfg.Events, idemoutbox.EventParams{Purpose: "charge-event:" + c.ID, Type: typ, Payload: payload})
	return err
}
