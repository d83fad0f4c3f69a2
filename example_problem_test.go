package idem_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem"
)

// A client decides what to do with an error from its code: the codes are
// stable, unlike titles and details.
func ExampleProblemCode() {
	advice := func(p idem.Problem) string {
		switch idem.ProblemCode(p.Code) {
		case idem.ProblemKeyInFlight, idem.ProblemUnavailable, idem.ProblemOutcomeUnknown, idem.ProblemOperationUnfinished:
			return "retry with the same key after Retry-After"
		case idem.ProblemKeyReused:
			return "a bug: a new operation needs a new key"
		case idem.ProblemBodyTimeout:
			return "send the whole body promptly, with the same key"
		case idem.ProblemKeyNotFound:
			return "the key is not yours, or it expired"
		case idem.ProblemKeyMissing, idem.ProblemKeyMalformed, idem.ProblemBodyMalformed,
			idem.ProblemBodyTooLarge, idem.ProblemMediaType, idem.ProblemUnauthenticated:
			return "fix the request; it was not processed"
		case idem.ProblemResponseNotRetained:
			return "it was processed; fetch the result another way"
		}
		return "the application's own problem"
	}
	for _, k := range idem.Problems() {
		fmt.Printf("%d %s: %s\n", k.Status, k.Code, advice(*k.New(idem.ProblemTypeBaseDefault, "")))
	}
	fmt.Println(idem.ProblemKeyInFlight.Kind().Title)
	// Output:
	// 400 idempotency-key-missing: fix the request; it was not processed
	// 400 idempotency-key-malformed: fix the request; it was not processed
	// 422 idempotency-key-reused: a bug: a new operation needs a new key
	// 409 idempotency-key-in-flight: retry with the same key after Retry-After
	// 400 request-body-malformed: fix the request; it was not processed
	// 413 request-body-too-large: fix the request; it was not processed
	// 408 request-body-timeout: send the whole body promptly, with the same key
	// 415 unsupported-media-type: fix the request; it was not processed
	// 401 unauthenticated: fix the request; it was not processed
	// 503 store-unavailable: retry with the same key after Retry-After
	// 503 outcome-unknown: retry with the same key after Retry-After
	// 200 idempotency-response-not-retained: it was processed; fetch the result another way
	// 404 idempotency-key-not-found: the key is not yours, or it expired
	// 503 operation-unfinished: retry with the same key after Retry-After
	// A request is outstanding for this Idempotency-Key
}

// An application answers its own errors as problems too, and serves a page
// for every type URI, its own and idem's.
func ExampleWriteProblem() {
	invalid := idem.ProblemKind{
		Code: "invalid-parameter", Status: http.StatusBadRequest, Title: "Invalid parameter",
		About: "A parameter of the request is invalid; the param member names it.",
	}
	rec := httptest.NewRecorder()
	p := invalid.New(idem.ProblemTypeBaseDefault, "amount must be positive.")
	p.Param = "amount"
	idem.WriteProblem(rec, p, 0)
	fmt.Println(rec.Code, rec.Header().Get("Content-Type") == idem.ProblemContentType)
	fmt.Print(rec.Body.String())

	var back idem.Problem
	json.Unmarshal(rec.Body.Bytes(), &back)
	fmt.Println(back.Code, back.Param)

	pages := httptest.NewServer(idem.ProblemsHandler(invalid))
	defer pages.Close()
	res, err := http.Get(pages.URL + back.Type)
	if err != nil {
		panic(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, strings.Contains(string(page), invalid.About))
	// Output:
	// 400 true
	// {"type":"/problems/invalid-parameter","title":"Invalid parameter","status":400,"detail":"amount must be positive.","code":"invalid-parameter","param":"amount"}
	// invalid-parameter amount
	// 200 true
}
