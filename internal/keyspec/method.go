package keyspec

import "net/http"

// NonIdempotent reports whether method is POST or PATCH, the methods that
// are not idempotent by definition (RFC 9110, section 9.2.2): the
// middleware requires a key on them by default, and the client keys and
// retries them.
func NonIdempotent(method string) bool {
	return method == http.MethodPost || method == http.MethodPatch
}
