package processor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// fault is what the simulator does to one charge.
type fault int

const (
	faultNone    fault = iota
	faultFail          // 503 before charging
	faultLose          // charge, then close the connection without an answer
	faultTimeout       // charge, then answer after the caller gave up
)

// faults draws the fault of each charge from a seeded source, so that a
// run can be repeated.
type faults struct {
	fail, lose, timeout float64
	seed                uint64

	mu  sync.Mutex
	rng *mrand.Rand
}

func newFaults(cfg Config) *faults {
	seed := cfg.Seed
	for seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	return &faults{fail: cfg.FailRate, lose: cfg.LoseRate, timeout: cfg.TimeoutRate, seed: seed,
		rng: mrand.New(mrand.NewPCG(seed, seed))}
}

// any reports whether any failure rate is set.
func (f *faults) any() bool { return f.fail+f.lose+f.timeout > 0 }

// draw picks the fault of one charge. It draws nothing when no rate is set.
func (f *faults) draw() fault {
	if !f.any() {
		return faultNone
	}
	f.mu.Lock()
	u := f.rng.Float64()
	f.mu.Unlock()
	switch {
	case u < f.fail:
		return faultFail
	case u < f.fail+f.lose:
		return faultLose
	case u < f.fail+f.lose+f.timeout:
		return faultTimeout
	}
	return faultNone
}

// fate is how the handler tells withFaults, which runs around the idem
// middleware, what to do with the answer once the charge has committed.
type fate struct {
	fault    fault
	status   int // the handler's status; the middleware answers another when the commit fails
	chargeID string
}

type fateKey struct{}

// setFault records, for withFaults, that the request made charge id and
// answered status, and what to do with its answer.
func setFault(ctx context.Context, f fault, status int, id string) {
	if fa, ok := ctx.Value(fateKey{}).(*fate); ok && f != faultNone {
		*fa = fate{fault: f, status: status, chargeID: id}
	}
}

// withFaults runs next, which holds the idem middleware, with the answer
// buffered. When the handler made a charge under a lose or timeout fault
// and the middleware committed it, the answer is lost or held; any other
// answer, a replay included, goes out as it is.
func (p *processor) withFaults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var fa fate
		buf := &buffer{header: make(http.Header), status: http.StatusOK}
		next.ServeHTTP(buf, r.WithContext(context.WithValue(r.Context(), fateKey{}, &fa)))
		if fa.fault != faultNone && buf.status == fa.status {
			switch fa.fault {
			case faultLose:
				p.cfg.Logger.InfoContext(r.Context(), "processord: charged; closing the connection without an answer", "charge", fa.chargeID)
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
					return
				}
				panic(http.ErrAbortHandler) // HTTP/2: reset the stream instead
			case faultTimeout:
				p.cfg.Logger.InfoContext(r.Context(), "processord: charged; holding the answer until the caller gives up", "charge", fa.chargeID)
				hold := time.NewTimer(p.cfg.HoldMax)
				select {
				case <-r.Context().Done():
				case <-p.stop:
				case <-hold.C:
				}
				hold.Stop()
			}
		}
		buf.writeTo(w)
	})
}

// buffer holds an answer until withFaults decides its fate.
type buffer struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (b *buffer) Header() http.Header { return b.header }

func (b *buffer) WriteHeader(status int) {
	if !b.wroteHeader && status >= 200 {
		b.status, b.wroteHeader = status, true
	}
}

func (b *buffer) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

func (b *buffer) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for name, values := range b.header {
		h[name] = values
	}
	w.WriteHeader(b.status)
	w.Write(b.body.Bytes())
}
