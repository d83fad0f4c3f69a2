package chaos

// This file is everything the harness knows about the command lines of
// paymentsd and processord. Keep it that way: when their flags change, only
// this file changes.

import (
	"fmt"
	"strconv"
	"time"
)

// Tenants are the clients the harness authenticates as; every key is
// scoped by one of them, and some keys are used by both.
var tenants = []tenant{
	{name: "alice", token: "sk_chaos_alice"},
	{name: "bob", token: "sk_chaos_bob"},
}

type tenant struct{ name, token string }

const (
	healthPath   = "/healthz"
	paymentsPath = "/v1/payments"

	// clockFileEnv names the file from which a paymentsd built with the
	// chaosclock tag reads its clock's offset (cmd/paymentsd/chaosclock.go).
	clockFileEnv = "PAYMENTSD_CHAOS_CLOCK_FILE"

	// processorToken is how paymentsd authenticates to processord.
	processorToken = "sk_chaos_processor"

	// webhookRetry is the relay's wait before its first retry of a failed
	// delivery, doubling per attempt: short, so that the receiver's
	// scheduled 500s are retried within the run's settling.
	webhookRetry = 250 * time.Millisecond
	// relayPoll is paymentsd's relay poll interval when no event is due
	// (idemoutbox.PollIntervalDefault); paymentsd has no flag for it.
	relayPoll = time.Second
)

// paymentsdArgs returns the command line of one paymentsd instance: its
// payments run by phases, each under a short lease that a paused holder
// loses to a takeover, and charge processord with derived keys; it and delivers its outbox's
// events to the run's webhook receiver, retrying soon after a failure.
func paymentsdArgs(addr, databaseURL, processorURL string, lockTimeout time.Duration, webhookURL, webhookSecret string) []string {
	tokens := ""
	for i, t := range tenants {
		if i > 0 {
			tokens += ","
		}
		tokens += t.token + "=" + t.name
	}
	return []string{
		"-addr", addr,
		"-db", databaseURL,
		"-tokens", tokens,
		"-lock-timeout", lockTimeout.String(),
		"-purge-interval", "0",
		"-shutdown-timeout", "1s",
		"-processor", processorURL,
		"-processor-token", processorToken,
		"-admin-addr", "off", // instances share a machine; /metrics is not needed
		"-webhook-url", webhookURL,
		"-webhook-secret", webhookSecret,
		"-webhook-retry", webhookRetry.String(),
	}
}

// processordArgs returns processord's command line: it fails charges
// before making them, loses answers after making them and answers late,
// at rates drawn from the seed.
func processordArgs(addr, dbPath string, delay time.Duration, p ProcessorFaults, seed uint64) []string {
	return []string{
		"-addr", addr, "-db", "sqlite:" + dbPath, "-delay", delay.String(),
		"-tokens", processorToken + "=paymentsd",
		"-fail-rate", strconv.FormatFloat(p.FailRate, 'g', -1, 64),
		"-lose-rate", strconv.FormatFloat(p.LoseRate, 'g', -1, 64),
		"-timeout-rate", strconv.FormatFloat(p.TimeoutRate, 'g', -1, 64),
		"-seed", strconv.FormatUint(seed|1, 10), // 0 would mean a random seed
	}
}

// paymentBody is the JSON body of a payment request.
func paymentBody(amount int64, customer string) []byte {
	return fmt.Appendf(nil, `{"amount":%d,"currency":"usd","customer":%q}`, amount, customer)
}
