package idemwebhook

import (
	"errors"
	"net/http"
	"time"

	"github.com/idemkit/idem"
)

// ToleranceDefault is the default of [VerifierOpts.Tolerance]: how far a
// delivery's signed timestamp may be from the receiver's clock.
const ToleranceDefault = 5 * time.Minute

// A Verifier checks that a delivery comes from the provider and returns
// the event it carries. [StandardWebhooks] and [Stripe] are the two that
// the package provides; the route's receiver uses one.
type Verifier interface {
	// Verify checks the delivery's headers and raw body at the receiver's
	// time now. Its error is a *VerifyError, which says what the sender is
	// told.
	Verify(h http.Header, body []byte, now time.Time) (Event, error)
}

// VerifierOpts are the options of [NewStandardWebhooks] and [NewStripe];
// nil means the defaults.
type VerifierOpts struct {
	// Tolerance is how far a delivery's signed timestamp may be from the
	// receiver's clock, either way; a delivery outside it is refused as a
	// replay. Defaults to ToleranceDefault (5 min).
	Tolerance time.Duration
}

func (o *VerifierOpts) tolerance() (time.Duration, error) {
	if o == nil || o.Tolerance == 0 {
		return ToleranceDefault, nil
	}
	if o.Tolerance < 0 {
		return 0, errors.New("idemwebhook: VerifierOpts.Tolerance must not be negative")
	}
	return o.Tolerance, nil
}

// Errors that a [VerifyError] wraps, one per problem code.
var (
	// ErrMalformed: a header is missing or does not parse, or the body is
	// not the provider's event. Answered with ProblemMalformed.
	ErrMalformed = errors.New("idemwebhook: malformed delivery")
	// ErrSignature: no signature matches. Answered with ProblemSignature.
	ErrSignature = errors.New("idemwebhook: no signature matches")
	// ErrTimestamp: the signed timestamp is outside the tolerance.
	// Answered with ProblemTimestamp.
	ErrTimestamp = errors.New("idemwebhook: timestamp outside the tolerance")
)

// VerifyError is why a delivery was refused.
type VerifyError struct {
	// Err is ErrMalformed, ErrSignature or ErrTimestamp.
	Err error
	// Reason says what is wrong, for the sender and the log; it never
	// repeats a secret or a signature.
	Reason string
}

func (e *VerifyError) Error() string { return e.Err.Error() + ": " + e.Reason }

// Unwrap returns Err.
func (e *VerifyError) Unwrap() error { return e.Err }

// code is the problem code that answers e.
func (e *VerifyError) code() idem.ProblemCode {
	switch {
	case errors.Is(e.Err, ErrSignature):
		return ProblemSignature
	case errors.Is(e.Err, ErrTimestamp):
		return ProblemTimestamp
	}
	return ProblemMalformed
}

func refuse(err error, reason string) *VerifyError {
	return &VerifyError{Err: err, Reason: reason}
}

// checkTime refuses a signed time further than tolerance from now. header
// names the field, for the reason.
func checkTime(signed, now time.Time, tolerance time.Duration, header string) *VerifyError {
	d := now.Sub(signed)
	switch {
	case d > tolerance:
		return refuse(ErrTimestamp, header+" is "+d.Round(time.Second).String()+" old, beyond the tolerance of "+tolerance.String())
	case d < -tolerance:
		return refuse(ErrTimestamp, header+" is "+(-d).Round(time.Second).String()+" ahead of the receiver's clock, beyond the tolerance of "+tolerance.String())
	}
	return nil
}
