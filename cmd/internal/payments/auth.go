package payments

import (
	"context"
	"net/http"
	"strconv"

	"github.com/idemkit/idem/idemlog"
	"github.com/idemkit/idem/internal/bearer"
)

// Authenticator answers 401 to a request without a known bearer token, and
// puts the client id of a known one in the request's context.
type Authenticator struct {
	// Tokens are the known tokens. Required.
	Tokens *bearer.Tokens
	// Realm is named in WWW-Authenticate. Defaults to "payments".
	Realm string
}

type clientKey struct{}

// ClientFromContext returns the client id that an Authenticator found.
func ClientFromContext(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(clientKey{}).(string)
	return c, ok && c != ""
}

// Wrap returns next behind the token check.
func (a Authenticator) Wrap(next http.Handler) http.Handler {
	realm := a.Realm
	if realm == "" {
		realm = "payments"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, ok := a.Tokens.Authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", "Bearer realm="+strconv.Quote(realm))
			problem(w, ProblemInvalidCredentials, "Send one Authorization field, Bearer <secret key>, with a valid key.")
			return
		}
		idemlog.SetClient(r.Context(), client)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, client)))
	})
}
