package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestWritePlot draws a Report with known figures and checks that the
// result is a well-formed SVG document that names every variant.
func TestWritePlot(t *testing.T) {
	t.Parallel()
	p50, p99 := 2.5, 7.5
	rep := Report{
		Order: []string{Bare, Atomic, Replay, Floor2RT, Floor2Commit, Conflict},
		Variants: map[string]VariantReport{
			Bare:         {RPS: 1000, Ratio: 1, P50: 4, P99: 9},
			Atomic:       {RPS: 480, Ratio: 0.48, P50: 8, P99: 20},
			Replay:       {RPS: 1900, Ratio: 1.9, P50: 2, P99: 5},
			Floor2RT:     {RPS: 690, Ratio: 0.69, P50: 6, P99: 14},
			Floor2Commit: {RPS: 550, Ratio: 0.55, P50: 7, P99: 16},
			Conflict:     {RPS: 300, P50: p50, P99: p99},
		},
		ConflictP50: &p50, ConflictP99: &p99,
	}
	var out bytes.Buffer
	if err := WritePlot(&out, rep); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, out.Bytes())
	joined := strings.Join(texts, "\n")
	for _, want := range append(rep.Order, "Throughput, ratio to bare", "Latency", "floor", "p50", "p99") {
		if !strings.Contains(joined, want) {
			t.Errorf("the SVG has no text %q; it has %q", want, texts)
		}
	}
}

// svgTexts parses doc as XML, checks that its root is an svg element, and
// returns the character data of its text elements.
func svgTexts(t *testing.T, doc []byte) []string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var texts []string
	depth, inText := 0, false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 && tok.Name.Local != "svg" {
				t.Fatalf("root element %q, want svg", tok.Name.Local)
			}
			depth++
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			depth--
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		}
	}
	if depth != 0 || len(texts) == 0 {
		t.Fatalf("the plot has no complete svg element with text (depth %d, %d texts)", depth, len(texts))
	}
	return texts
}

// TestWritePlotEmpty checks that a Report without variants is an error,
// not an empty picture.
func TestWritePlotEmpty(t *testing.T) {
	t.Parallel()
	if err := WritePlot(io.Discard, Report{}); err == nil {
		t.Fatal("WritePlot of an empty Report succeeded")
	}
}
