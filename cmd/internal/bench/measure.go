package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The measurement of one variant in one round: concurrent requests for a
// duration, each answer's latency, and the process's and the database's
// CPU over the run (tally).

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

type tally struct {
	n, errors  int64
	firstError string // what the first failed request got
	elapsed    time.Duration
	cpu, dbCPU time.Duration
	latencies  []time.Duration
}

func (t *tally) add(o *tally) {
	t.n += o.n
	t.errors += o.errors
	if t.firstError == "" {
		t.firstError = o.firstError
	}
	t.elapsed += o.elapsed
	t.cpu += o.cpu
	t.dbCPU += o.dbCPU
	t.latencies = append(t.latencies, o.latencies...)
}

// perRequest divides d among the tally's requests.
func (t *tally) perRequest(d time.Duration) time.Duration {
	if t.n == 0 {
		return 0
	}
	return d / time.Duration(t.n)
}

func (t *tally) rate() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.n) / t.elapsed.Seconds()
}

func (t *tally) quantile(q float64) time.Duration {
	if len(t.latencies) == 0 {
		return 0
	}
	s := slices.Clone(t.latencies)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// drainLimit is how long after the end of its duration a round waits for
// its requests in flight: a request that hangs cannot hold the run forever.
const drainLimit = 30 * time.Second

// measure runs cfg.Concurrency clients against url for cfg.Duration, or
// until they have sent cfg.Requests requests when that is set. At the end
// of the duration the clients send no more, and the requests in flight run
// to their answers, which count: a request cut off on its way would break
// its connections (pgx closes a connection whose query is canceled, and
// asks the server to cancel it on another), and the variant that runs next
// would pay for new ones. The run lasts until the last answer, or until
// drainLimit after the end of the duration, when what is still in flight is
// cut off and not counted.
func measure(ctx context.Context, client *http.Client, url string, cfg Config, nextKey func() string, want int) *tally {
	// more reports whether a client may send another request: until the
	// end of the duration, or while requests of the fixed count remain.
	var more func() bool
	if cfg.Requests > 0 {
		var left atomic.Int64
		left.Store(cfg.Requests)
		more = func() bool { return left.Add(-1) >= 0 }
	} else {
		end := time.Now().Add(cfg.Duration)
		more = func() bool { return time.Now().Before(end) }
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end.Add(drainLimit))
		defer cancel()
	}
	var mu sync.Mutex
	total := &tally{}
	var wg sync.WaitGroup
	cpu0, db0 := processCPU(), map[int]time.Duration(nil)
	if strings.HasPrefix(cfg.DatabaseURL, "postgres") {
		db0 = serverCPU() // SQLite runs in this process, in its CPU
	}
	begin := time.Now()
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := &tally{}
			for ctx.Err() == nil && more() {
				t0 := time.Now()
				status, said, err := send(ctx, client, url, nextKey(), want)
				if ctx.Err() != nil {
					break // the run was canceled, or this request outlasted drainLimit
				}
				local.n++
				local.latencies = append(local.latencies, time.Since(t0))
				if err != nil || status != want {
					local.errors++
					if local.firstError == "" {
						local.firstError = said
						if err != nil {
							local.firstError = err.Error()
						}
					}
				}
			}
			mu.Lock()
			total.add(local)
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.elapsed = time.Since(begin)
	total.cpu = processCPU() - cpu0
	if db0 != nil {
		// By process: backends that exited in between are left out, and
		// new ones count from zero.
		for pid, used := range serverCPU() {
			total.dbCPU += used - db0[pid]
		}
	}
	return total
}

const body = `{"amount":4200,"currency":"usd","customer":"cus_bench"}`

// send sends one payment request with key and returns the answer's status.
// When the status is not want, it also returns what the answer said: the
// status and the start of its body, such as a problem's title and detail.
func send(ctx context.Context, client *http.Client, base, key string, want int) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/payments", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer sk_bench")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	if res.StatusCode == want {
		io.Copy(io.Discard, res.Body)
		return res.StatusCode, "", nil
	}
	said, _ := io.ReadAll(io.LimitReader(res.Body, maxSaid))
	io.Copy(io.Discard, res.Body)
	return res.StatusCode, fmt.Sprintf("%d %s", res.StatusCode, strings.Join(strings.Fields(string(said)), " ")), nil
}

// maxSaid bounds how much of a failed answer's body send reports.
const maxSaid = 300
