package idemotel_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// spanTree renders spans as trees, one per trace, children under their
// parent in start order, with each span's attributes and links: what
// the closing note and docs/tracing.md show.
func spanTree(spans tracetest.SpanStubs) string {
	byParent := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if p := s.Parent.SpanID(); s.Parent.IsValid() && ids[p] {
			byParent[p] = append(byParent[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	order := func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) }
	slices.SortStableFunc(roots, order)
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		indent := strings.Repeat("    ", depth)
		fmt.Fprintf(&b, "%s%s  span=%s", indent, s.Name, s.SpanContext.SpanID())
		if depth == 0 {
			fmt.Fprintf(&b, " trace=%s", s.SpanContext.TraceID())
			if s.Parent.IsValid() {
				fmt.Fprintf(&b, " parent=%s (remote)", s.Parent.SpanID())
			}
		}
		if s.Status.Code != 0 {
			fmt.Fprintf(&b, " status=%s %q", s.Status.Code, s.Status.Description)
		}
		b.WriteString("\n")
		var attrs []string
		for _, a := range s.Attributes {
			attrs = append(attrs, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
		}
		if len(attrs) > 0 {
			fmt.Fprintf(&b, "%s    · %s\n", indent, strings.Join(attrs, " "))
		}
		for _, l := range s.Links {
			var la []string
			for _, a := range l.Attributes {
				la = append(la, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
			}
			fmt.Fprintf(&b, "%s    ↪ link trace=%s span=%s %s\n", indent, l.SpanContext.TraceID(), l.SpanContext.SpanID(), strings.Join(la, " "))
		}
		kids := byParent[s.SpanContext.SpanID()]
		slices.SortStableFunc(kids, order)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

// logTree prints the span tree of a scenario in the test's log.
func logTree(t *testing.T, title string, spans tracetest.SpanStubs) {
	t.Helper()
	t.Logf("span tree: %s\n%s", title, spanTree(spans))
}

// find returns the spans named name.
func find(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the one span named name, or fails the test.
func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	got := find(spans, name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %s, want 1:\n%s", len(got), name, spanTree(spans))
	}
	return got[0]
}

// attr returns the value of a span's attribute as a string; "" when it
// has none.
func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}
