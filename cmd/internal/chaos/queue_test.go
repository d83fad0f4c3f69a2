package chaos

import (
	"os/exec"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/rabbittest/rabbitnode"
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
	sum := runClean(t, Config{
		Duration: 30 * time.Second, Seed: 20261203, SourceDir: src,
		Workloads: append(DefaultWorkloads(), Weighted{QueuedTransfer{}, 3}),
	})
	if sum.QueuedLost != 0 || sum.QueuedPublished == 0 || sum.QueuedResent == 0 || sum.BrokerKills == 0 || sum.Workloads["queued-transfer"] == 0 {
		t.Errorf("a queue run that proves nothing: %d published, %d re-sent, %d broker kills, %d lost",
			sum.QueuedPublished, sum.QueuedResent, sum.BrokerKills, sum.QueuedLost)
	}
	if sum.BankTotalOK == nil || !*sum.BankTotalOK {
		t.Errorf("bank total not constant")
	}
}

// TestRunQueueRabbitMQ sends commands to a throwaway RabbitMQ node, which
// every instance consumes through a link of its own while the instances
// are killed and paused and the links cut: a fixed number of commands,
// every tenth published twice and every twentieth also sent over HTTP with
// the same key, and no other traffic. Every command applied once, none
// lost, the bank's total constant.
func TestRunQueueRabbitMQ(t *testing.T) {
	t.Parallel()
	src := setupRun(t)
	if _, err := rabbitnode.Bin(); err != nil {
		t.Skip(err)
	}
	const commands = 300
	sum := runClean(t, Config{
		Duration: 30 * time.Second, Seed: 20261207, SourceDir: src,
		Queue: QueueRabbitMQ, QueueCommands: commands, Proxies: -1,
		Workloads: []Weighted{},
	})
	if sum.Queue != QueueRabbitMQ || sum.Workloads["queued-command"] != commands ||
		sum.QueuedResent < commands/10 || sum.QueuedPublished < commands+commands/10 || sum.Kills == 0 || sum.BrokerLinkFaults == 0 {
		t.Errorf("a queue run that proves nothing: queue %q, workloads %v, %d published, %d published twice, %d kills, %d broker link faults",
			sum.Queue, sum.Workloads, sum.QueuedPublished, sum.QueuedResent, sum.Kills, sum.BrokerLinkFaults)
	}
	if sum.QueuedLost != 0 || sum.Duplicated != 0 || sum.TransfersApplied+sum.InsufficientFunds != sum.Transfers {
		t.Errorf("%d transfers, %d applied once, %d insufficient funds, %d duplicated, %d lost",
			sum.Transfers, sum.TransfersApplied, sum.InsufficientFunds, sum.Duplicated, sum.QueuedLost)
	}
	if sum.BankTotalOK == nil || !*sum.BankTotalOK {
		t.Errorf("bank total not constant")
	}
}
