package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchPrintsRatios(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"bench", "--db", "sqlite:" + filepath.Join(t.TempDir(), "b.db"),
		"--duration", "100ms", "--rounds", "1", "--concurrency", "2"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"bare", "atomic", "two-phase", "replay", "1.00x"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "round 1") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
}

func TestBenchDrawsPlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	svg := filepath.Join(dir, "bench.svg")
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"bench", "--db", "sqlite:" + filepath.Join(dir, "b.db"),
		"--requests", "20", "--rounds", "1", "--concurrency", "2", "--variants", "bare,atomic", "--plot", svg}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, new(struct {
		XMLName xml.Name `xml:"svg"`
	})); err != nil {
		t.Fatalf("the plot is not an svg document: %v", err)
	}
	for _, want := range []string{">bare<", ">atomic<"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the plot does not name %s", want)
		}
	}
}

func TestBenchNeedsADatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), []string{"bench"}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("exit %d without --db, want %d", code, exitUsage)
	}
}
