package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunQueue adds transfers sent as commands to a throwaway JetStream,
// consumed by every instance and killed with SIGKILL during the traffic:
// no violation, and no command lost.
func TestRunQueue(t *testing.T) {
	t.Parallel()
	src := setupRun(t)
	if _, err := exec.LookPath("nats-server"); err != nil {
		t.Skip("no nats-server on the PATH")
	}
	sum, err := Run(context.Background(), Config{
		Duration: 30 * time.Second, Seed: 20261203, SourceDir: src,
		Workloads:      append(DefaultWorkloads(), Weighted{QueuedTransfer{}, 3}),
		ViolationsFile: filepath.Join(t.TempDir(), "violations.jsonl"),
		Progress:       testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	sum.WriteText(&text)
	t.Log("\n" + text.String())
	if sum.Violations > 0 {
		b, _ := os.ReadFile(sum.ViolationsFile)
		t.Fatalf("%d violations; history of the offending keys:\n%.8000s", sum.Violations, b)
	}
	if sum.QueuedLost != 0 || sum.QueuedPublished == 0 || sum.QueuedResent == 0 || sum.BrokerKills == 0 || sum.Workloads["queued-transfer"] == 0 {
		t.Errorf("a queue run that proves nothing: %d published, %d re-sent, %d broker kills, %d lost",
			sum.QueuedPublished, sum.QueuedResent, sum.BrokerKills, sum.QueuedLost)
	}
	if sum.BankTotalOK == nil || !*sum.BankTotalOK {
		t.Errorf("bank total not constant")
	}
}
