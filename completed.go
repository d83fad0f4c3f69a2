package idem

// CompletedError is returned, wrapped, by [Lease.Complete] when another
// request completed the key before this holder could store its response:
// the holder's writes were rolled back, and Record is the stored key. The
// middleware answers from Record as it answers a claim that found it: the
// replay, or 422 for a different request. It wraps [ErrLeaseLost], so code
// that knows only that error still sees a lost lease.
type CompletedError struct {
	Record *Record
}

func (e *CompletedError) Error() string {
	return "idem: another request completed the key first"
}

func (e *CompletedError) Unwrap() error { return ErrLeaseLost }

// ExistsError is returned, wrapped, by Complete and Release of a
// speculative lease (see [ClaimParams.Speculative]) whose claim, sent late,
// found the key held by a request in flight or completed: nothing the
// handler sent to the store ran, and Record is the key as the claim found
// it (Status [StatusInFlight] for one in flight). The middleware answers
// from Record as it answers a claim that found it: the replay, 409 or 422,
// never with the handler's own response. It wraps [ErrLeaseLost].
type ExistsError struct {
	Record *Record
}

func (e *ExistsError) Error() string {
	if e.Record != nil && e.Record.Status == StatusCompleted {
		return "idem: the key was completed by another request"
	}
	return "idem: the key is held by another request"
}

func (e *ExistsError) Unwrap() error { return ErrLeaseLost }
