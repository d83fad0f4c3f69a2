package idem_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/benchbody"
)

// The middleware's own cost, without a database: the memory store, an
// in-process recorder, and a handler that reads the body and answers 201
// with a small JSON document. Compare each "new-key" and "replay" with the
// "bare" of the same body: the difference is what idem adds to a request.
// Besides ns/op, each reports cpu-ns/op, the CPU time of the whole process
// (garbage collection included) per request, which a machine shared with
// other work inflates less than the elapsed time.
//
//	go test -run '^$' -bench Middleware -benchmem -count 5 .
func BenchmarkMiddleware(b *testing.B) {
	for _, body := range benchBodies() {
		b.Run(body.name+"/bare", func(b *testing.B) { benchBare(b, body) })
		b.Run(body.name+"/new-key", func(b *testing.B) { benchNewKey(b, body) })
		b.Run(body.name+"/replay", func(b *testing.B) { benchReplay(b, body) })
	}
}

// benchBody is a request body the benchmarks send.
type benchBody struct {
	name        string
	contentType string
	data        []byte
}

func benchBodies() []benchBody {
	return []benchBody{
		{"json-1KiB", "application/json", benchbody.JSON(1 << 10)},
		{"json-64KiB", "application/json", benchbody.JSON(64 << 10)},
		{"form", "application/x-www-form-urlencoded", benchbody.Form()},
	}
}

// benchHandler reads the body and answers 201 with a small JSON document,
// as a create endpoint does.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/payments/pay_0042")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"id":"pay_0042","status":"succeeded","amount":12500,"currency":"EUR"}`)
})

// benchMiddleware returns benchHandler behind the middleware on store, with
// the defaults and a logger that writes JSON, as a service's does.
func benchMiddleware(b *testing.B, store idemstore.Store) http.Handler {
	b.Helper()
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "client-1", true },
		Logger:   slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	return mw.Wrap(benchHandler)
}

func benchRequest(body benchBody, key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", bytes.NewReader(body.data))
	r.Header.Set("Content-Type", body.contentType)
	r.Header.Set(idem.HeaderKey, key)
	return r
}

// serveOne serves one request and fails the benchmark unless the answer
// has the status and replay header it should.
func serveOne(b *testing.B, h http.Handler, r *http.Request, replayed bool) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated || (w.Header().Get(idem.HeaderReplayed) == "true") != replayed {
		b.Fatalf("got %d %q (replayed %q), want 201 (replayed %t)", w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get(idem.HeaderReplayed), replayed)
	}
}

// reportCPU reports the process's CPU time per iteration since start, when
// it is known.
func reportCPU(b *testing.B, start time.Duration) {
	if end, ok := processCPU(); ok {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

func benchBare(b *testing.B, body benchBody) {
	b.ReportAllocs()
	start, _ := processCPU()
	for range b.N {
		serveOne(b, benchHandler, benchRequest(body, `"bare"`), false)
	}
	reportCPU(b, start)
}

// newKeyBatch is how many keys the memory store holds before the
// benchmark purges them and goes on under another client, as a store's
// retention would. The store stays small: a database store keeps its keys
// outside the process, and thousands of records in the Go heap would make
// the garbage collector's marking of them, a cost of the memory store, the
// larger part of what is measured (with 4,096 keys, a new key cost about 5
// us more).
const newKeyBatch = 64

func benchNewKey(b *testing.B, body benchBody) {
	keys := make([]string, newKeyBatch)
	for i := range keys {
		keys[i] = `"key-` + strconv.Itoa(i) + `"`
	}
	store := idemtest.NewMemoryStore()
	client := "client-0"
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return client, true },
		Logger:   slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Wrap(benchHandler)
	purge := idemstore.PurgeParams{Before: time.Now().Add(time.Hour)}
	b.ReportAllocs()
	b.ResetTimer()
	start, _ := processCPU()
	for i := range b.N {
		if i > 0 && i%newKeyBatch == 0 {
			if n, err := store.Purge(context.Background(), purge); err != nil || n != newKeyBatch {
				b.Fatalf("purge = %d, %v; want %d keys", n, err, newKeyBatch)
			}
			client = "client-" + strconv.Itoa(i) // new keys, which the middleware has not seen
		}
		serveOne(b, h, benchRequest(body, keys[i%newKeyBatch]), false)
	}
	reportCPU(b, start)
}

func benchReplay(b *testing.B, body benchBody) {
	h := benchMiddleware(b, idemtest.NewMemoryStore())
	serveOne(b, h, benchRequest(body, `"replayed"`), false)
	b.ReportAllocs()
	b.ResetTimer()
	start, _ := processCPU()
	for range b.N {
		serveOne(b, h, benchRequest(body, `"replayed"`), true)
	}
	reportCPU(b, start)
}
