package check

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseLinks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   []link
	}{
		{"QuotedRel", []string{`</docs/idempotency>; rel="help"`},
			[]link{{"/docs/idempotency", []string{"help"}}}},
		{"TokenRelAndOtherParams", []string{`<https://example.com/spec>;type="application/json"; rel=DescribedBy`},
			[]link{{"https://example.com/spec", []string{"describedby"}}}},
		{"SeveralValuesAndFields", []string{`</a>; rel="next", </b>; rel="help describedby"`, `</c>`},
			[]link{{"/a", []string{"next"}}, {"/b", []string{"help", "describedby"}}, {"/c", nil}}},
		{"CommaInsideQuotedParam", []string{`</a>; title="x, y"; rel=help, </b>; rel=next`},
			[]link{{"/a", []string{"help"}}, {"/b", []string{"next"}}}},
		{"SkipsMalformedValue", []string{`garbage; rel=help, </ok>; rel=help`},
			[]link{{"/ok", []string{"help"}}}},
		{"FirstRelWins", []string{`</a>; rel=help; rel=next`},
			[]link{{"/a", []string{"help"}}}},
		{"Unterminated", []string{`</a; rel=help`}, nil},
		{"AngleBracketInURI", []string{`<<>; rel=help`}, nil},
		{"Empty", []string{"", " , "}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := parseLinks(tt.values); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseLinks(%q) = %+v, want %+v", tt.values, got, tt.want)
			}
		})
	}
}

// FuzzParseLinks checks that any Link value parses without panicking or
// looping and yields only links with a URI free of angle brackets.
func FuzzParseLinks(f *testing.F) {
	for _, s := range []string{`</a>; rel="help"`, `<x>;rel=a b, <y>`, `<`, `";,<>`, `</a>; t="\"", </b>`, `a, b, <c>;`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, l := range parseLinks([]string{v}) {
			if l.uri == "" || strings.ContainsAny(l.uri, "<>") {
				t.Fatalf("parseLinks(%q) returned link with URI %q", v, l.uri)
			}
			for _, r := range l.rels {
				if r == "" || r != strings.ToLower(r) {
					t.Fatalf("parseLinks(%q) returned rel %q", v, r)
				}
			}
		}
	})
}
