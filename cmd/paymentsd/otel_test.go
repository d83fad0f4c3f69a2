package main

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver: it keeps the spans that
// paymentsd sends to POST /v1/traces.
type collector struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP/HTTP trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Write(out)
}

// TestOtelSendsLinkedTraces runs paymentsd with -otel at a collector in
// the test: a payment and its replay arrive as spans, the replay's linked
// to the payment's request, and a client's traceparent is honoured.
func TestOtelSendsLinkedTraces(t *testing.T) {
	t.Parallel()
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	p := runInProcess(t, "-addr", "127.0.0.1:0", "-admin-addr", "off", "-db", db, "-tokens", "sk_a=alice",
		"-otel", strings.TrimPrefix(srv.URL, "http://"))
	base := waitListening(t, p.stdout.lines, "paymentsd")

	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_a")
	req.Header.Set("Idempotency-Key", `"otel-1"`)
	req.Header.Set("Traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("payment: %v %v", res, err)
	}
	res.Body.Close()
	if replay := post(t, base, "sk_a", `"otel-1"`, body); replay.status != http.StatusCreated {
		t.Fatalf("replay: %d %s", replay.status, replay.body)
	}
	if err := p.stop(t); err != nil { // flushes the last spans
		t.Fatal(err)
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	var first, replay *tracepb.Span
	names := map[string]int{}
	for _, s := range col.spans {
		names[s.Name]++
		switch {
		case s.Name == "idem.request" && hex.EncodeToString(s.TraceId) == callerTrace:
			first = s
		case s.Name == "idem.replay":
			replay = s
		}
	}
	t.Logf("spans received by the collector: %v", names)
	if first == nil || replay == nil {
		t.Fatalf("no request span in the caller's trace %s, or no replay span: %v", callerTrace, names)
	}
	if names["idem.claim"] != 2 || names["idem.run"] != 1 || names["idem.complete"] != 1 {
		t.Errorf("spans = %v; want 2 claims, 1 run, 1 completion", names)
	}
	if len(replay.Links) != 1 || !bytes.Equal(replay.Links[0].TraceId, first.TraceId) || !bytes.Equal(replay.Links[0].SpanId, first.SpanId) {
		t.Errorf("replay links = %v; want one to the payment's request span %x/%x", replay.Links, first.TraceId, first.SpanId)
	}
}
