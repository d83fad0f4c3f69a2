package check

import (
	"strings"
	"testing"
)

func TestFindRetention(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		kind    string // of the first finding; "" for none
		onTopic bool
		excerpt string
	}{
		{"Hours", "Idempotency keys are retained for 24 hours.", "statement", true, "retained for 24 hours"},
		{"DurationFirst", "Idempotency: after 1 day, keys expire and may be reused.", "statement", true, "after 1 day, keys expire"},
		{"ShortUnit", `idempotency: {ttl: 24h}`, "statement", true, "ttl: 24h"},
		{"ISODuration", `"idempotencyRetention": "P1D"`, "statement", true, "Retention\": \"P1D"},
		{"WordedNumber", "Idempotency keys are purged after one week.", "statement", true, "purged after one week"},
		{"Hyphenated", "We keep idempotency keys under a 24-hour retention policy.", "statement", true, "24-hour retention"},
		{"Extension", `{"x-idempotency-window": "see docs"}`, "extension", true, "x-idempotency-window"},
		{"OffTopic", "Access tokens expire after 1 hour." + strings.Repeat(" filler", 200) + " Send an Idempotency-Key header.",
			"statement", false, "expire after 1 hour"},
		{"WordWithoutDuration", "Idempotency keys expire eventually.", "", false, ""},
		{"DurationWithoutWord", "Idempotency keys: 24 hours.", "", false, ""},
		{"TooFarApart", "Idempotency keys expire." + strings.Repeat(" x", 200) + " 24 hours", "", false, ""},
		{"Nothing", "Create a payment.", "", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := findRetention(tt.text)
			if tt.kind == "" {
				if len(got) != 0 {
					t.Fatalf("findRetention(%q) = %+v, want nothing", tt.text, got)
				}
				return
			}
			if len(got) == 0 {
				t.Fatalf("findRetention(%q) found nothing, want a %s", tt.text, tt.kind)
			}
			f := got[0]
			if f.kind != tt.kind || f.onTopic != tt.onTopic || !strings.Contains(f.excerpt, tt.excerpt) {
				t.Errorf("first finding = %+v, want kind %s, onTopic %v, excerpt containing %q", f, tt.kind, tt.onTopic, tt.excerpt)
			}
		})
	}
}
