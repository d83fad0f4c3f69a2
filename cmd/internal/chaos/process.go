package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/child"
)

// process is one supervised child: a paymentsd instance or processord. It
// is restarted whenever it exits, until stop; a SIGKILL fault is a kill that
// the supervisor answers with a restart.
type process struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	addr    string // 127.0.0.1:port it listens on
	// clockFile holds a paymentsd's clock offset (ClockSkew).
	clockFile string

	mu       sync.Mutex
	cmd      *exec.Cmd     // the running child, nil between runs
	exited   chan struct{} // closed when cmd has exited
	paused   bool          // cmd is stopped by SIGSTOP
	stopping bool
	starts   int
	done     chan struct{} // closed when the supervisor has returned
}

// restartDelay is how long the supervisor waits before starting a child
// again: long enough not to spin while PostgreSQL is down.
const restartDelay = 200 * time.Millisecond

// supervise starts the child and keeps it running until stop.
func (p *process) supervise() {
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		for {
			exited, err := p.startOnce()
			if err != nil {
				fmt.Fprintf(os.Stderr, "chaos: start %s: %v\n", p.name, err)
			} else {
				<-exited
			}
			p.mu.Lock()
			stopping := p.stopping
			p.mu.Unlock()
			if stopping {
				return
			}
			time.Sleep(restartDelay)
		}
	}()
}

func (p *process) startOnce() (<-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil, errors.New("stopping")
	}
	log, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = log, log
	// The child dies with the harness, whatever way the harness ends.
	cmd.SysProcAttr = dieWithParent()
	if err := child.Start(cmd); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		if p.cmd == cmd {
			p.cmd, p.paused = nil, false
		}
		p.mu.Unlock()
		close(exited)
	}()
	p.cmd, p.exited, p.paused = cmd, exited, false
	p.starts++
	return exited, nil
}

// kill sends SIGKILL to the running child and waits until it has exited;
// the supervisor then starts it again. It reports whether a child was
// running.
func (p *process) kill() bool {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return false
	}
	_ = cmd.Process.Kill()
	<-exited
	return true
}

// pause stops the running child with SIGSTOP and returns a function that
// continues it with SIGCONT, unless it was killed in between.
func (p *process) pause() (resume func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := p.cmd
	if cmd == nil || p.paused {
		return nil, false
	}
	if err := stopProcess(cmd.Process); err != nil {
		return nil, false
	}
	p.paused = true
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.cmd == cmd {
			_ = continueProcess(cmd.Process)
			p.paused = false
		}
	}, true
}

// stop ends supervision and kills the child, continuing it first if it is
// paused. It may be called more than once.
func (p *process) stop() {
	p.mu.Lock()
	p.stopping = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = continueProcess(cmd.Process)
		<-exited
	}
	if p.done != nil {
		<-p.done
	}
}

// waitReady polls GET /healthz until the child answers 200 or ctx is done.
func (p *process) waitReady(ctx context.Context, client *http.Client) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+healthPath, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w (log: %s)", p.name, p.addr, ctx.Err(), p.logPath)
		case <-tick.C:
		}
	}
}
