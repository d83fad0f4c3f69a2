package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"mime"
	"net/url"
	"strconv"
	"strings"
)

// detectContentType guesses the media type of a request body: JSON when it
// parses as JSON or is empty, a form when it parses as one, JSON otherwise.
func detectContentType(body []byte) string {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || json.Valid(trimmed) {
		return jsonContentType
	}
	s := string(trimmed)
	if strings.Contains(s, "=") && !strings.ContainsAny(s, " \t\r\n{}\"") {
		if _, err := url.ParseQuery(s); err == nil {
			return formContentType
		}
	}
	return jsonContentType
}

// changedBody derives a body that differs from body in exactly one field, for
// the mismatch check, and describes the change. For a JSON object it increments
// the first numeric top-level field, or else appends "x" to the first string
// field; a form body gets the same treatment. Every other byte is kept.
func changedBody(contentType string, body []byte) ([]byte, string, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, "", fmt.Errorf("cannot derive a changed body: content type: %w", err)
	}
	switch {
	case mt == jsonContentType || strings.HasSuffix(mt, "+json"):
		return changeJSON(body)
	case mt == formContentType:
		return changeForm(body)
	}
	return nil, "", fmt.Errorf("cannot derive a changed body for content type %s", mt)
}

// errNoField means the body has no top-level number or string to change.
var errNoField = errors.New("cannot derive a changed body: no top-level number or string field")

func changeJSON(body []byte) ([]byte, string, error) {
	if !json.Valid(body) {
		return nil, "", errors.New("cannot derive a changed body: the body is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return nil, "", errors.New("cannot derive a changed body: the body is not a JSON object")
	}
	type span struct {
		name       string
		start, end int64
	}
	var firstString *span
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", fmt.Errorf("cannot derive a changed body: %w", err)
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, "", fmt.Errorf("cannot derive a changed body: %w", err)
		}
		end := dec.InputOffset()
		start := end - int64(len(raw))
		switch raw[0] {
		case '"':
			if firstString == nil {
				firstString = &span{name, start, end}
			}
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			if next, ok := increment(string(raw)); ok {
				out := splice(body, start, end, next)
				return out, fmt.Sprintf("top-level field %q %s → %s", name, raw, next), nil
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, "", fmt.Errorf("cannot derive a changed body: %w", err)
	}
	if firstString == nil {
		return nil, "", errNoField
	}
	// A JSON string always ends with an unescaped quote: insert before it.
	s := firstString
	out := splice(body, s.end-1, s.end-1, "x")
	return out, fmt.Sprintf("top-level field %q %s → %s", s.name, body[s.start:s.end], out[s.start:s.end+1]), nil
}

func changeForm(body []byte) ([]byte, string, error) {
	pairs := strings.Split(string(body), "&")
	for i, pair := range pairs {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			continue
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			continue
		}
		if next, ok := increment(val); ok {
			pairs[i] = k + "=" + url.QueryEscape(next)
			return []byte(strings.Join(pairs, "&")), fmt.Sprintf("form field %s %s → %s", k, val, next), nil
		}
	}
	for i, pair := range pairs {
		if k, v, ok := strings.Cut(pair, "="); ok && k != "" {
			pairs[i] = pair + "x"
			return []byte(strings.Join(pairs, "&")), fmt.Sprintf("form field %s %q → %q", k, v, v+"x"), nil
		}
	}
	return nil, "", errors.New("cannot derive a changed body: no name=value pair in the form")
}

// increment adds one to a decimal number written as JSON writes numbers,
// keeping integers integral and the number of fraction digits. It reports
// false when s is not such a number or adding one does not change it.
func increment(s string) (string, bool) {
	if !isJSONNumber(s) {
		return "", false
	}
	if !strings.ContainsAny(s, ".eE") {
		n, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return "", false
		}
		return n.Add(n, big.NewInt(1)).String(), true
	}
	if !strings.ContainsAny(s, "eE") {
		n, ok := new(big.Rat).SetString(s)
		if !ok {
			return "", false
		}
		prec := len(s) - strings.IndexByte(s, '.') - 1
		return n.Add(n, big.NewRat(1, 1)).FloatString(prec), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f+1 == f {
		return "", false
	}
	return strconv.FormatFloat(f+1, 'g', -1, 64), true
}

// isJSONNumber reports whether s is a number in JSON's grammar.
func isJSONNumber(s string) bool {
	if s == "" || !json.Valid([]byte(s)) {
		return false
	}
	return s[0] == '-' || ('0' <= s[0] && s[0] <= '9')
}

// splice returns b with b[start:end] replaced by repl, in a new slice.
func splice(b []byte, start, end int64, repl string) []byte {
	out := make([]byte, 0, int64(len(b))-(end-start)+int64(len(repl)))
	out = append(out, b[:start]...)
	out = append(out, repl...)
	return append(out, b[end:]...)
}
