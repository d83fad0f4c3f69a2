// Package checktest provides an in-memory payments endpoint that implements
// the Idempotency-Key contract, for testing the conformance checker and the
// idem check command: the conforming variant must pass every required check,
// and each Fault breaks exactly one rule so that exactly one check must fail.
//
// It is a small honest reference, not a stub: it parses keys, fingerprints
// bodies, scopes keys per Authorization value, answers 409 while a key is
// executing and replays stored responses.
package checktest
