// Package check tests a live HTTP endpoint against the Idempotency-Key
// contract, black-box: the server needs no idem code, only an endpoint that
// claims to follow draft-ietf-httpapi-idempotency-key-header with Stripe-like
// semantics.
//
// Run sends real requests, each check with fresh random keys so that a run can
// be repeated against a live service, and returns a Report with one Result per
// check:
//
//   - missing-key: a request without Idempotency-Key gets 400.
//   - malformed-key: keys that are not one valid sf-string (unterminated,
//     a list, spaces, a tab, a non-ASCII byte, empty, two fields) get 400.
//   - long-key: a key one character over the documented maximum gets 400.
//   - first-request: a fresh key is processed with a 2xx.
//   - replay: the same key and body return the first status and body byte for
//     byte; Idempotent-Replayed: true is expected (a warning without it).
//   - mismatch: the same key with a changed body gets 422.
//   - concurrency: a burst of simultaneous requests with one key executes once:
//     one distinct 2xx body, 409 for the rest, no 5xx, and a later retry
//     replays that body.
//   - client-scope: with a second client's credentials, a key client A used is
//     a new key for client B.
//   - retention-published: the expiry policy for keys is published in an
//     OpenAPI document, a linked help page or a problem type (advisory).
//
// The probes are real requests: first-request, long-key, concurrency and
// client-scope each create resources on the endpoint, so point the checker at
// a test account or a sandbox.
//
// A typical use:
//
//	report, err := check.Run(ctx, check.Config{
//		URL:    "https://api.example.com/v1/payments",
//		Header: http.Header{"Authorization": {"Bearer sk_test_..."}},
//		Body:   []byte(`{"amount":100,"currency":"usd"}`),
//	})
//	if err != nil {
//		return err // the Config is unusable
//	}
//	report.WriteTable(os.Stdout)
//	if !report.Passed() {
//		os.Exit(1)
//	}
package check
