// Package replay holds the rules of which response headers idem stores
// and replays, for every front that answers for the middleware: the
// middleware and the resumer (package idem) and the proxy's replay of an
// upstream's answer.
package replay

import (
	"fmt"
	"net/http"
	"slices"
)

// The names on the replay list by default, which every list begins with.
const (
	ContentType     = "Content-Type"
	ContentLanguage = "Content-Language"
	Location        = "Location"
)

// Defaults is the replay list by default. A list that Headers returns is
// the default one exactly when it has as many names.
var Defaults = [...]string{ContentType, ContentLanguage, Location}

// Headers returns the response headers that a stored response keeps and
// a replay sends: Defaults, then extra (a Config's ReplayHeaders),
// canonical and each once.
func Headers(extra []string) []string {
	l := append(make([]string, 0, len(Defaults)+len(extra)), Defaults[:]...)
	for _, h := range extra {
		if h = http.CanonicalHeaderKey(h); !slices.Contains(l, h) {
			l = append(l, h)
		}
	}
	return l
}

// forbidden are never stored or replayed, whatever the configuration.
var forbidden = []string{
	"Set-Cookie", "Authorization", "Proxy-Authorization", "Proxy-Authenticate",
	"Www-Authenticate", "Cookie", "Content-Length", "Transfer-Encoding", "Connection",
	"Idempotent-Replayed",
}

// Check refuses a configured replay list with a forbidden header; field
// names the setting in the error.
func Check(field string, headers []string) error {
	for _, h := range headers {
		if slices.Contains(forbidden, http.CanonicalHeaderKey(h)) {
			return fmt.Errorf("idem: %s must not contain %q", field, h)
		}
	}
	return nil
}
