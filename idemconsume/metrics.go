package idemconsume

import "context"

// Metrics receives the result of every message a consumer handles: what a
// dashboard shows as duplicates absorbed (OutcomeDuplicate), redeliveries
// (redelivered), dead letters (Action DeadLetter) and failures. Methods
// must be safe for concurrent use and fast.
type Metrics interface {
	Message(ctx context.Context, consumer string, r Result, redelivered bool)
}

type noMetrics struct{}

func (noMetrics) Message(context.Context, string, Result, bool) {}
