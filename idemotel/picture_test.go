package idemotel_test

import (
	"flag"
	"fmt"
	"html"
	"os"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

var svgOut = flag.String("svg", "", "write a picture of the spans of a new key and of its replay, on PostgreSQL in atomic mode, to this SVG file (docs/tracing.svg)")

// box is one span in the picture.
type box struct {
	s          tracetest.SpanStub
	x, y, w, h int
}

// writePicture draws each group of spans as a trace panel, one span a row
// indented under its parent, with each link as an arrow to the span it
// points to.
func writePicture(t *testing.T, path string, titles []string, groups []tracetest.SpanStubs) {
	t.Helper()
	const (
		rowH, boxH, indent, boxW, left, panelGap = 34, 26, 28, 560, 24, 26
	)
	var b strings.Builder
	boxes := map[trace.SpanID]box{}
	var order []box
	y := 16
	var panels []string
	for gi, spans := range groups {
		top := y
		y += 30
		var walk func(s tracetest.SpanStub, depth int)
		kids := map[trace.SpanID][]tracetest.SpanStub{}
		var roots []tracetest.SpanStub
		ids := map[trace.SpanID]bool{}
		for _, s := range spans {
			ids[s.SpanContext.SpanID()] = true
		}
		for _, s := range spans {
			if ids[s.Parent.SpanID()] {
				kids[s.Parent.SpanID()] = append(kids[s.Parent.SpanID()], s)
			} else {
				roots = append(roots, s)
			}
		}
		byStart := func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) }
		slices.SortStableFunc(roots, byStart)
		walk = func(s tracetest.SpanStub, depth int) {
			bx := box{s: s, x: left + 16 + depth*indent, y: y, w: boxW - depth*indent, h: boxH}
			boxes[s.SpanContext.SpanID()] = bx
			order = append(order, bx)
			y += rowH
			k := kids[s.SpanContext.SpanID()]
			slices.SortStableFunc(k, byStart)
			for _, c := range k {
				walk(c, depth+1)
			}
		}
		for _, r := range roots {
			walk(r, 0)
		}
		panels = append(panels, fmt.Sprintf(`<rect x="%d" y="%d" width="%d" height="%d" rx="8" fill="#f6f8fa" stroke="#d0d7de"/>`+
			`<text x="%d" y="%d" font-weight="bold">%s</text><text x="%d" y="%d" fill="#57606a">trace %s</text>`,
			left, top, boxW+32, y-top+4, left+14, top+20, html.EscapeString(titles[gi]), left+330, top+20, spans[0].SpanContext.TraceID()))
		y += panelGap
	}
	width, height := left*2+boxW+32+150, y
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">`+"\n", width, height)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#cf222e"/></marker></defs>` + "\n")
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for _, p := range panels {
		b.WriteString(p + "\n")
	}
	for _, bx := range order {
		fill := "#ddf4ff"
		if len(bx.s.Links) > 0 {
			fill = "#ffebe9"
		}
		var attrs []string
		for _, a := range bx.s.Attributes {
			switch a.Key {
			case "idem.outcome", "idem.lease_token", "http.response.status_code", "idem.key_digest":
				attrs = append(attrs, fmt.Sprintf("%s=%s", strings.TrimPrefix(string(a.Key), "idem."), a.Value.String()))
			}
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="4" fill="%s" stroke="#54aeff"/>`, bx.x, bx.y, bx.w, bx.h, fill)
		fmt.Fprintf(&b, `<text x="%d" y="%d"><tspan font-weight="bold">%s</tspan>  <tspan fill="#57606a">%s</tspan></text>`+"\n",
			bx.x+8, bx.y+17, html.EscapeString(bx.s.Name), html.EscapeString(strings.Join(attrs, " ")))
	}
	for _, bx := range order {
		for _, l := range bx.s.Links {
			to, ok := boxes[l.SpanContext.SpanID()]
			if !ok {
				continue
			}
			x1, y1 := bx.x+bx.w, bx.y+bx.h/2
			x2, y2 := to.x+to.w, to.y+to.h/2
			cx := max(x1, x2) + 110
			fmt.Fprintf(&b, `<path d="M%d,%d C%d,%d %d,%d %d,%d" fill="none" stroke="#cf222e" stroke-width="2" marker-end="url(#arrow)"/>`+"\n", x1, y1, cx, y1, cx, y2, x2+2, y2)
			var kind string
			for _, a := range l.Attributes {
				kind = a.Value.String()
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#cf222e">link (%s)</text>`+"\n", cx-40, (y1+y2)/2, html.EscapeString(kind))
		}
	}
	b.WriteString("</svg>\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
