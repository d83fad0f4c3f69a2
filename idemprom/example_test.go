package idemprom_test

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemprom"
	"github.com/idemkit/idem/idemtest"
)

// The application builds the collectors, registers them on its own
// registry, and hands them to the middleware as its Metrics.
func Example() {
	m := idemprom.New(&idemprom.Config{
		Namespace:   idemprom.NamespaceDefault,
		ConstLabels: prometheus.Labels{"service": "payments"},
	})
	registry := prometheus.NewRegistry()
	registry.MustRegister(m)

	_, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		ClientID: func(r *http.Request) (string, bool) { return r.Header.Get("X-Client"), true },
		Metrics:  m,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("result series:", testutil.CollectAndCount(m, "idem_requests_total"))
	// Output: result series: 11
}
