package idemgrpc_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/idemgrpc"
)

// gateway serves POST /v1/payments through a grpc-gateway mux to the gRPC
// server of e, as the handler that protoc-gen-grpc-gateway generates does:
// the mux's header matchers decide which headers become metadata.
func gateway(t *testing.T, e *env, opts ...runtime.ServeMuxOption) *httptest.Server {
	t.Helper()
	mux := runtime.NewServeMux(opts...)
	err := mux.HandlePath(http.MethodPost, "/v1/payments", func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		ctx, err := runtime.AnnotateContext(r.Context(), mux, r, paymentsv1.PaymentService_CreatePayment_FullMethodName, runtime.WithHTTPPathPattern("/v1/payments"))
		if err != nil {
			runtime.HTTPError(r.Context(), mux, &runtime.JSONPb{}, w, r, err)
			return
		}
		marshaler := &runtime.JSONPb{}
		req := &paymentsv1.CreatePaymentRequest{}
		body, _ := io.ReadAll(r.Body)
		if err := protojson.Unmarshal(body, req); err != nil {
			runtime.HTTPError(ctx, mux, marshaler, w, r, err)
			return
		}
		var md runtime.ServerMetadata
		resp, err := e.client.CreatePayment(ctx, req, grpc.Header(&md.HeaderMD), grpc.Trailer(&md.TrailerMD))
		ctx = runtime.NewServerMetadataContext(ctx, md)
		if err != nil {
			runtime.HTTPError(ctx, mux, marshaler, w, r, err)
			return
		}
		runtime.ForwardResponseMessage(ctx, mux, marshaler, w, r, resp)
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func postThrough(t *testing.T, url, key string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/v1/payments", strings.NewReader(`{"amount": 4200, "currency": "usd", "customer": "cus_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestGatewayHeaderMatcherPassesTheKey(t *testing.T) {
	t.Parallel()
	e := setup(t, backends[0], idem.Config{}, nil)
	// The gateway passes Authorization on as metadata by default; the key
	// only with the matcher.
	plain := gateway(t, e)
	if resp, body := postThrough(t, plain.URL, "gw-1"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "IDEMPOTENCY_KEY_MISSING") {
		t.Fatalf("default matcher: %d %s, want 400: the key is dropped", resp.StatusCode, body)
	}
	srv := gateway(t, e,
		runtime.WithIncomingHeaderMatcher(idemgrpc.GatewayHeaderMatcher(runtime.DefaultHeaderMatcher)),
		runtime.WithOutgoingHeaderMatcher(idemgrpc.GatewayOutgoingHeaderMatcher(func(k string) (string, bool) {
			return runtime.MetadataHeaderPrefix + k, true
		})))
	first, fbody := postThrough(t, srv.URL, "gw-1")
	again, abody := postThrough(t, srv.URL, "gw-1")
	if first.StatusCode != http.StatusOK || again.StatusCode != http.StatusOK || fbody != abody {
		t.Fatalf("through the gateway: %d %s, then %d %s; want the same payment twice", first.StatusCode, fbody, again.StatusCode, abody)
	}
	if first.Header.Get(idem.HeaderReplayed) != "" || again.Header.Get(idem.HeaderReplayed) != "true" {
		t.Errorf("Idempotent-Replayed %q then %q, want none then true", first.Header.Get(idem.HeaderReplayed), again.Header.Get(idem.HeaderReplayed))
	}
	if n := e.svc.runs.Load(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}
