package idemrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo that every status
// idem answers with carries. Its reason is the problem's code in upper
// snake case (see [Reason]).
const ErrorDomain = "idem.idemkit.github.com"

// Metadata keys of the answers.
const (
	// HeaderReplayed is the header metadata set to "true" on a replayed
	// answer: the stored answer of an earlier call with the key.
	HeaderReplayed = "idempotent-replayed"
	// HeaderKey is the request metadata that carries the key, with the
	// syntax and limits of the HTTP Idempotency-Key header.
	HeaderKey = "idempotency-key"
	// HeaderPushback is the trailer metadata that tells gRPC's own retry
	// policy (gRFC A6) how long to wait, in milliseconds: set with
	// RetryInfo on ABORTED and UNAVAILABLE.
	HeaderPushback = "grpc-retry-pushback-ms"
)

// Answer is the RPC answer to a call: a response message, or an error
// status with details.
type Answer struct {
	// Message is the response; nil when Status is set.
	Message proto.Message
	// Status is the error status, with google.rpc details; nil with
	// Message.
	Status *spb.Status
	// Replayed is set when the answer is the stored answer of an earlier
	// call with the key: the adapter sets the HeaderReplayed metadata.
	Replayed bool
	// RetryAfter, when not zero, is how long the client should wait before
	// it retries with the same key, which Status's RetryInfo says too: the
	// adapter sets the HeaderPushback trailer.
	RetryAfter time.Duration
}

// Reason is the ErrorInfo reason of a problem code:
// "idempotency-key-reused" is IDEMPOTENCY_KEY_REUSED.
func Reason(c idem.ProblemCode) string {
	return strings.ToUpper(strings.ReplaceAll(string(c), "-", "_"))
}

// problemCode is the RPC code of each of idem's problems.
func problemCode(p *idem.Problem) code.Code {
	switch idem.ProblemCode(p.Code) {
	case idem.ProblemKeyMissing, idem.ProblemKeyMalformed, idem.ProblemBodyMalformed,
		idem.ProblemBodyTooLarge, idem.ProblemMediaType, idem.ProblemBodyTimeout:
		return code.Code_INVALID_ARGUMENT
	case idem.ProblemUnauthenticated:
		return code.Code_UNAUTHENTICATED
	case idem.ProblemKeyInFlight:
		return code.Code_ABORTED
	case idem.ProblemKeyReused:
		return code.Code_FAILED_PRECONDITION
	case idem.ProblemUnavailable, idem.ProblemOutcomeUnknown, idem.ProblemOperationUnfinished:
		return code.Code_UNAVAILABLE
	}
	switch {
	case p.Status == http.StatusServiceUnavailable:
		return code.Code_UNAVAILABLE
	case p.Status >= 400 && p.Status < 500:
		return code.Code_FAILED_PRECONDITION
	}
	return code.Code_UNKNOWN
}

// problemStatus is the status of a problem that the middleware answered,
// with retryAfter its Retry-After. missing is the message of a call that
// needs a key and has none, which says where an RPC sends it.
func problemStatus(p *idem.Problem, retryAfter time.Duration, missing string) *spb.Status {
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	if idem.ProblemCode(p.Code) == idem.ProblemKeyMissing && missing != "" {
		msg = missing
	}
	info := &errdetails.ErrorInfo{Reason: Reason(idem.ProblemCode(p.Code)), Domain: ErrorDomain, Metadata: map[string]string{"problemType": p.Type}}
	if p.OriginalRequest != "" {
		info.Metadata["originalRequest"] = p.OriginalRequest
	}
	details := []proto.Message{info}
	if len(p.Fields) > 0 {
		br := &errdetails.BadRequest{}
		for _, ptr := range p.Fields {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
				Field:       fieldOfPointer(ptr),
				Description: "differs from the first request with this idempotency key",
				Reason:      info.Reason,
			})
		}
		details = append(details, br)
	}
	if retryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	}
	return newStatus(problemCode(p), msg, details...)
}

// fieldOfPointer is the field path of a top-level JSON pointer: "/amount"
// is "amount".
func fieldOfPointer(ptr string) string {
	f := strings.TrimPrefix(ptr, "/")
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(f)
}

// newStatus returns a status with details.
func newStatus(c code.Code, msg string, details ...proto.Message) *spb.Status {
	st := &spb.Status{Code: int32(c), Message: msg}
	for _, d := range details {
		a, err := anypb.New(d)
		if err != nil { // details are generated messages
			panic(fmt.Sprintf("idemrpc: pack %T: %v", d, err))
		}
		st.Details = append(st.Details, a)
	}
	return st
}

// decode reads the answer that rec recorded; out returns the message that
// a response is decoded into, and missing is the message of a call without
// a key (see problemStatus).
func decode(ctx context.Context, rec *recorder, out func() proto.Message, missing string) (Answer, error) {
	if rec.status == 0 {
		// The middleware answered nothing: the call's context ended
		// before the key was claimed.
		if err := ctx.Err(); err != nil {
			return Answer{Status: contextStatus(err)}, nil
		}
		return Answer{}, errors.New("idemrpc: the middleware answered nothing")
	}
	mt, _, _ := mime.ParseMediaType(rec.header.Get("Content-Type"))
	ans := Answer{Replayed: rec.header.Get(idem.HeaderReplayed) == "true"}
	switch mt {
	case MessageContentType:
		m := out()
		if err := proto.Unmarshal(rec.body.Bytes(), m); err != nil {
			return Answer{}, fmt.Errorf("idemrpc: unmarshal the recorded response: %w", err)
		}
		ans.Message = m
	case StatusContentType:
		st := &spb.Status{}
		if err := proto.Unmarshal(rec.body.Bytes(), st); err != nil {
			return Answer{}, fmt.Errorf("idemrpc: unmarshal the recorded status: %w", err)
		}
		ans.Status = st
	case idem.ProblemContentType:
		var p idem.Problem
		if err := json.Unmarshal(rec.body.Bytes(), &p); err != nil {
			return Answer{}, fmt.Errorf("idemrpc: unmarshal the problem: %w", err)
		}
		if s, err := strconv.Atoi(rec.header.Get("Retry-After")); err == nil && s > 0 {
			ans.RetryAfter = time.Duration(s) * time.Second
		}
		ans.Status = problemStatus(&p, ans.RetryAfter, missing)
	default:
		return Answer{}, fmt.Errorf("%w: status %d, Content-Type %q", errNoRecord, rec.status, mt)
	}
	return ans, nil
}

// contextStatus is the status of a call whose context ended with err.
func contextStatus(err error) *spb.Status {
	if errors.Is(err, context.DeadlineExceeded) {
		return newStatus(code.Code_DEADLINE_EXCEEDED, err.Error())
	}
	return newStatus(code.Code_CANCELLED, err.Error())
}

// internalStatus is an INTERNAL status for what the server did wrong.
func internalStatus(msg string) *spb.Status { return newStatus(code.Code_INTERNAL, msg) }
