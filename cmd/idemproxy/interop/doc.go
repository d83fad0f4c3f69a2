// Package interop runs idemproxy in front of a real upstream and a real
// client that nobody in this project wrote: stripe-mock, Stripe's API mock,
// and stripe-go, Stripe's Go client, with its own retries and its own
// generated Idempotency-Keys.
//
// It is a separate module so that stripe-go never enters idem's go.mod.
// Run it with ./run.sh, which installs stripe-mock when it is missing.
package interop
