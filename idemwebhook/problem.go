package idemwebhook

import (
	"net/http"

	"github.com/idemkit/idem"
)

// The problem codes of the receiver, answered before any effect. A
// provider retries every answer that is not 2xx, so a delivery refused for
// a reason that a retry does not fix (a secret that is not the endpoint's)
// keeps coming back until the provider gives up: the log says why.
const (
	// ProblemMalformed: 400, a signature header is missing or does not
	// parse, the body is not the provider's event (a Stripe event without
	// an id), or the event id is not usable as a key.
	ProblemMalformed idem.ProblemCode = "webhook-malformed"
	// ProblemSignature: 401, no signature of the delivery matches any of
	// the endpoint's secrets.
	ProblemSignature idem.ProblemCode = "webhook-signature-invalid"
	// ProblemTimestamp: 401, the signed timestamp is further from the
	// receiver's clock than the tolerance: a replayed delivery, or a
	// clock that is off.
	ProblemTimestamp idem.ProblemCode = "webhook-timestamp-outside-tolerance"
	// ProblemMethod: 405, a webhook is delivered with POST.
	ProblemMethod idem.ProblemCode = "webhook-method-not-allowed"
)

var problemKinds = []idem.ProblemKind{
	{Code: ProblemMalformed, Status: http.StatusBadRequest, Title: "Webhook delivery is malformed",
		About: "A signature header is missing or does not parse, the body is not an event of the endpoint's provider, or the event id is not 1 to 255 printable ASCII characters. Nothing was processed."},
	{Code: ProblemSignature, Status: http.StatusUnauthorized, Title: "Webhook signature is invalid",
		About: "No signature of the delivery matches any of the endpoint's secrets: the body was changed on the way, or it was signed with a secret the endpoint does not hold. Nothing was processed."},
	{Code: ProblemTimestamp, Status: http.StatusUnauthorized, Title: "Webhook timestamp is outside the tolerance",
		About: "The delivery's signed timestamp is further from the receiver's clock than the endpoint's tolerance allows: the delivery is old and may be a replay, or one of the clocks is off. Nothing was processed; a fresh delivery of the event is signed anew and is accepted."},
	{Code: ProblemMethod, Status: http.StatusMethodNotAllowed, Title: "Webhooks are delivered with POST",
		About: "The endpoint receives webhooks, which are POST requests. Nothing was processed."},
}

// Problems returns the receiver's kinds of problem, in a new slice, for
// idem.ProblemsHandler(idemwebhook.Problems()...).
func Problems() []idem.ProblemKind {
	return append([]idem.ProblemKind(nil), problemKinds...)
}

func kindOf(code idem.ProblemCode) idem.ProblemKind {
	for _, k := range problemKinds {
		if k.Code == code {
			return k
		}
	}
	return code.Kind()
}
