// Package idemotel traces idem with OpenTelemetry: an [idem.Tracer] that
// turns the middleware's claims, handler runs, completions, replays, 409s
// and 422s, the Resumer's runs and the Purger's passes into spans, and
// stores each request's W3C trace context with its key.
//
// The span of a replay, a 409 or a 422 carries a link to the trace of the
// request that ran the key (or holds it, or first used it): the answer to
// "which request actually ran this?" is one click away in the tracing
// backend. The Resumer's span of an operation whose client went away
// continues the trace of the request that started it, and links to it.
//
//	tracer, err := idemotel.New(&idemotel.Config{TracerProvider: tp})
//	mw, err := idem.New(store, &idem.Config{ClientID: clientID, Tracer: tracer})
//
// Attributes never carry a key or a body: the key appears as its digest
// (idem.key_digest), as in idem's logs. See docs/tracing.md.
package idemotel
