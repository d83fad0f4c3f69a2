package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/idemkit/idem/internal/check"
)

const checkUsage = `Usage: idem check --url URL --body BODY [flags]

Check sends real requests to a live endpoint and reports whether it follows the
Idempotency-Key contract (draft-ietf-httpapi-idempotency-key-header with
Stripe-like semantics): 400 for missing, malformed and over-long keys, faithful
replays, 422 for a key reused with another body, one execution for concurrent
duplicates, keys scoped per client, and a published retention policy. Every
check uses fresh random keys, so runs are repeatable. The probes create real
resources: use a test account or a sandbox.

Exit status: 0 if every required check passed, 1 if one did not, 2 for usage
errors.

Example:

	idem check --url https://api.example.com/v1/payments \
	    --header 'Authorization: Bearer sk_test_a' \
	    --second-client-header 'Authorization: Bearer sk_test_b' \
	    --body '{"amount":100,"currency":"usd"}'

Flags:
`

// runCheck is "idem check": it maps flags to a check.Config, runs the checks
// and prints the report.
func runCheck(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("idem check", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), checkUsage)
		fs.PrintDefaults()
	}
	env := c.env()
	var (
		url            = fs.String("url", env.String("IDEM_CHECK_URL", ""), "endpoint under test, an absolute http(s) `URL` (required; env IDEM_CHECK_URL)")
		method         = fs.String("method", env.String("IDEM_CHECK_METHOD", check.MethodDefault), "HTTP `method` of every probe (env IDEM_CHECK_METHOD)")
		body           = fs.String("body", env.String("IDEM_CHECK_BODY", ""), "`body` of a valid request the endpoint answers with 2xx; @file reads a file (env IDEM_CHECK_BODY)")
		contentType    = fs.String("content-type", env.String("IDEM_CHECK_CONTENT_TYPE", ""), "`Content-Type` of the body (default application/json; form bodies are detected) (env IDEM_CHECK_CONTENT_TYPE)")
		mismatchBody   = fs.String("mismatch-body", env.String("IDEM_CHECK_MISMATCH_BODY", ""), "a valid `body` that differs from --body; @file reads a file (default: --body with its first number +1, or \"x\" appended to its first string) (env IDEM_CHECK_MISMATCH_BODY)")
		mismatchStatus = fs.Int("mismatch-status", env.Int("IDEM_CHECK_MISMATCH_STATUS", check.MismatchStatusDefault), "`status` expected for a used key with a different body (env IDEM_CHECK_MISMATCH_STATUS)")
		concurrency    = fs.Int("concurrency", env.Int("IDEM_CHECK_CONCURRENCY", check.ConcurrencyDefault), "`number` of simultaneous requests with one key in the concurrency check, 2 to 256 (env IDEM_CHECK_CONCURRENCY)")
		maxKeyLength   = fs.Int("max-key-length", env.Int("IDEM_CHECK_MAX_KEY_LENGTH", check.MaxKeyLengthDefault), "`length` of the longest key the endpoint documents as valid (env IDEM_CHECK_MAX_KEY_LENGTH)")
		bareKeys       = fs.Bool("bare-keys", env.Bool("IDEM_CHECK_BARE_KEYS", false), "send keys as bare tokens instead of quoted sf-strings (env IDEM_CHECK_BARE_KEYS)")
		spec           = fs.String("spec", env.String("IDEM_CHECK_SPEC", ""), "`URL` of the published idempotency specification (default: try /openapi.json, /openapi.yaml, /.well-known/openapi.json) (env IDEM_CHECK_SPEC)")
		timeout        = fs.Duration("timeout", env.Duration("IDEM_CHECK_TIMEOUT", check.TimeoutDefault), "`timeout` of each request (env IDEM_CHECK_TIMEOUT)")
		runTimeout     = fs.Duration("run-timeout", env.Duration("IDEM_CHECK_RUN_TIMEOUT", check.RunTimeoutDefault), "`timeout` of the whole run (env IDEM_CHECK_RUN_TIMEOUT)")
		jsonOut        = fs.Bool("json", false, "print the report as JSON instead of a table")
		verbose        = fs.Bool("v", false, "log every request to stderr")
	)
	headers := envHeader(env, "IDEM_CHECK_HEADER")
	fs.Var(headers, "header", "header `'Name: value'` sent with every probe, repeatable (env IDEM_CHECK_HEADER, one header per line)")
	second := envHeader(env, "IDEM_CHECK_SECOND_CLIENT_HEADER")
	fs.Var(second, "second-client-header", "header `'Name: value'` that makes a probe come from a second client, repeatable; enables the client-scope check (env IDEM_CHECK_SECOND_CLIENT_HEADER, one header per line)")

	if env.Err() != nil {
		fmt.Fprintf(c.stderr, "idem check: %v\n", env.Err())
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		return checkUsageError(c, "unexpected argument %q", fs.Arg(0))
	}
	if *url == "" {
		return checkUsageError(c, "--url is required")
	}

	cfg := check.Config{
		URL:            *url,
		Method:         *method,
		Header:         headers.header,
		ContentType:    *contentType,
		MismatchStatus: *mismatchStatus,
		Concurrency:    *concurrency,
		MaxKeyLength:   *maxKeyLength,
		BareKeys:       *bareKeys,
		SpecURL:        *spec,
		Timeout:        *timeout,
		RunTimeout:     *runTimeout,
		Logger:         slog.New(slog.DiscardHandler),
	}
	if len(second.header) > 0 {
		cfg.SecondClientHeader = second.header
	}
	var err error
	if cfg.Body, err = bodyValue(*body); err != nil {
		return checkUsageError(c, "--body: %v", err)
	}
	if *mismatchBody != "" {
		if cfg.MismatchBody, err = bodyValue(*mismatchBody); err != nil {
			return checkUsageError(c, "--mismatch-body: %v", err)
		}
	}
	if *timeout <= 0 || *runTimeout <= 0 {
		return checkUsageError(c, "--timeout and --run-timeout must be positive")
	}
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}

	report, err := check.Run(ctx, cfg)
	if err != nil {
		msg, _ := strings.CutPrefix(err.Error(), check.ErrInvalidConfig.Error()+": ")
		return checkUsageError(c, "%s", msg)
	}
	if *jsonOut {
		err = report.WriteJSON(c.stdout)
	} else {
		err = report.WriteTable(c.stdout)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "idem check: %v\n", err)
		return exitFail
	}
	if ctx.Err() != nil {
		fmt.Fprintln(c.stderr, "idem check: interrupted")
	}
	if !report.Passed() {
		return exitFail
	}
	return exitOK
}

func checkUsageError(c *cli, format string, args ...any) int {
	fmt.Fprintf(c.stderr, "idem check: %s\nRun 'idem check -h' for usage.\n", fmt.Sprintf(format, args...))
	return exitUsage
}
