package idemconsume_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemtest"
)

// A consumer given the same message twice, as a broker redelivers it after
// a crash between the commit and the ack, runs its handler once.
func Example() {
	applied := 0
	c, err := idemconsume.New(idemtest.NewMemoryStore(), func(ctx context.Context, m *idemconsume.Message) error {
		applied++ // in a service: a write through the store's transaction in ctx
		return nil
	}, &idemconsume.Config{Name: "transfers", Idem: &idem.Config{Logger: quiet}})
	if err != nil {
		panic(err)
	}
	m := &idemconsume.Message{ID: "cmd-7", Body: []byte(`{"amount":100}`)}
	for range 2 {
		r := c.Handle(context.Background(), m)
		fmt.Println(r.Outcome, r.Action)
	}
	changed := &idemconsume.Message{ID: "cmd-7", Body: []byte(`{"amount":900}`)}
	r := c.Handle(context.Background(), changed)
	fmt.Println(r.Outcome, r.Action, r.Fields)
	fmt.Println("applied", applied)
	// Output:
	// executed ack
	// duplicate ack
	// mismatch dead_letter [/amount]
	// applied 1
}
