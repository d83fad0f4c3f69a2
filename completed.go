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
