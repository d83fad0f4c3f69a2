package check

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

func TestChangedBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		contentType string
		body        string
		want        string
		change      string
		err         string
	}{
		{"IncrementsFirstNumber", jsonContentType, `{"currency":"usd","amount":100,"fee":3}`,
			`{"currency":"usd","amount":101,"fee":3}`, `"amount" 100 → 101`, ""},
		{"KeepsWhitespace", "application/json; charset=utf-8", "{\n  \"amount\" : 100 ,\n  \"x\": 1\n}",
			"{\n  \"amount\" : 101 ,\n  \"x\": 1\n}", "", ""},
		{"SkipsNestedNumbers", jsonContentType, `{"meta":{"n":1},"items":[1,2],"amount":5}`,
			`{"meta":{"n":1},"items":[1,2],"amount":6}`, "", ""},
		{"NegativeNumber", jsonContentType, `{"delta":-1}`, `{"delta":0}`, "", ""},
		{"KeepsFractionDigits", jsonContentType, `{"amount":10.50}`, `{"amount":11.50}`, "", ""},
		{"Exponent", jsonContentType, `{"amount":1.5e2}`, `{"amount":151}`, "", ""},
		{"HugeInteger", jsonContentType, `{"n":123456789012345678901234567890}`, `{"n":123456789012345678901234567891}`, "", ""},
		{"ExponentTooLargeFallsBackToString", jsonContentType, `{"n":1e300,"s":"a"}`, `{"n":1e300,"s":"ax"}`, `"s" "a" → "ax"`, ""},
		{"AppendsToFirstString", jsonContentType, `{"ok":true,"customer":"cus_1","memo":"m"}`,
			`{"ok":true,"customer":"cus_1x","memo":"m"}`, `"customer" "cus_1" → "cus_1x"`, ""},
		{"StringEndingInEscape", jsonContentType, `{"s":"a\\"}`, `{"s":"a\\x"}`, "", ""},
		{"ProblemJSON", "application/merge-patch+json", `{"n":1}`, `{"n":2}`, "", ""},
		{"NoFieldToChange", jsonContentType, `{"ok":true,"list":[1]}`, "", "", "no top-level number or string"},
		{"NotAnObject", jsonContentType, `[1,2]`, "", "", "not a JSON object"},
		{"EmptyBody", jsonContentType, ``, "", "", "not valid JSON"},
		{"InvalidJSON", jsonContentType, `{"a":}`, "", "", "not valid JSON"},
		{"InvalidAfterChangedField", jsonContentType, `{"n":0000}`, "", "", "not valid JSON"},
		{"FormNumber", formContentType, "currency=usd&amount=100&fee=3", "currency=usd&amount=101&fee=3", "form field amount 100 → 101", ""},
		{"FormString", formContentType, "currency=usd&customer=cus_1", "currency=usdx&customer=cus_1", `form field currency "usd" → "usdx"`, ""},
		{"FormBracketNames", formContentType, "metadata%5Border%5D=6735&currency=usd", "metadata%5Border%5D=6736&currency=usd", "", ""},
		{"FormWithoutPairs", formContentType, "justtext", "", "", "no name=value pair"},
		{"UnknownType", "text/plain", "hello", "", "", "content type text/plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, change, err := changedBody(tt.contentType, []byte(tt.body))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("body = %s, want %s", got, tt.want)
			}
			if !strings.Contains(change, tt.change) {
				t.Errorf("change = %q, want it to contain %q", change, tt.change)
			}
		})
	}
}

func TestDetectContentType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want string
	}{
		{`{"amount":100}`, jsonContentType},
		{"", jsonContentType},
		{"amount=100&currency=usd", formContentType},
		{"metadata[order]=6735", formContentType},
		{"amount=100%zz", jsonContentType},
		{"hello world", jsonContentType},
		{`{"a":"b=c"`, jsonContentType},
	}
	for _, tt := range tests {
		if got := detectContentType([]byte(tt.body)); got != tt.want {
			t.Errorf("detectContentType(%q) = %s, want %s", tt.body, got, tt.want)
		}
	}
}

// FuzzChangedBody checks that a derived body always differs from the original,
// stays valid, and changes nothing but one field.
func FuzzChangedBody(f *testing.F) {
	for _, s := range []string{`{"amount":100}`, `{"a":{"b":1},"c":"d"}`, `{"n":-0.5e-3}`, `{"s":"\u00e9\\"}`,
		"amount=100&currency=usd", "a=%41&b=", `{"x" : 9 , "y":[1]}`, "=1&a=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, ct := range []string{jsonContentType, formContentType} {
			got, change, err := changedBody(ct, []byte(body))
			if err != nil {
				continue
			}
			if bytes.Equal(got, []byte(body)) {
				t.Fatalf("%s: changed body equals the original %q", ct, body)
			}
			if change == "" {
				t.Fatalf("%s: no description of the change", ct)
			}
			switch ct {
			case jsonContentType:
				if !json.Valid([]byte(body)) {
					t.Fatalf("derived a body from invalid JSON %q", body)
				}
				if !json.Valid(got) {
					t.Fatalf("derived body %q from %q is not valid JSON", got, body)
				}
				var before, after map[string]json.RawMessage
				if json.Unmarshal([]byte(body), &before) != nil {
					continue // e.g. trailing data after the object
				}
				if err := json.Unmarshal(got, &after); err != nil {
					t.Fatalf("derived body %q: %v", got, err)
				}
				if diff := differingFields(before, after); diff != 1 && len(before) == len(after) {
					// Duplicate names make maps lossy; only check unambiguous bodies.
					if countFields(body) == len(before) {
						t.Fatalf("derived body %q from %q changes %d fields, want 1", got, body, diff)
					}
				}
			case formContentType:
				if _, err := url.ParseQuery(string(got)); err != nil && isParsableForm(body) {
					t.Fatalf("derived form %q from valid %q does not parse: %v", got, body, err)
				}
			}
		}
	})
}

func differingFields(a, b map[string]json.RawMessage) int {
	n := 0
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			n++
		}
	}
	return n
}

func countFields(body string) int {
	dec := json.NewDecoder(strings.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return -1
	}
	n := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			return -1
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return -1
		}
		n++
	}
	return n
}

func isParsableForm(s string) bool {
	_, err := url.ParseQuery(s)
	return err == nil
}
