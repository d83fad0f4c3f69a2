// Package payments is the domain of the reference payments service: payment
// validation, the HTTP API, the payment tables in SQLite and PostgreSQL, and
// a ledger of accounts and transfers (ledger.go) served in atomic mode.
package payments

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Payment is a created payment.
type Payment struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Customer    string `json:"customer"`
	Description string `json:"description,omitempty"`
	Status      string `json:"status"`
	Created     int64  `json:"created"`

	ClientID       string `json:"-"`
	IdempotencyKey string `json:"-"`
}

// Params are the validated inputs of a new payment.
type Params struct {
	Amount      int64
	Currency    string
	Customer    string
	Description string
}

// ParamError names the parameter that is missing or invalid.
type ParamError struct {
	Param  string
	Reason string
}

func (e *ParamError) Error() string { return fmt.Sprintf("payments: %s: %s", e.Param, e.Reason) }

// ErrNotFound means no payment of this client has the id.
var ErrNotFound = errors.New("payments: payment not found")

// Limits of the payment parameters, documented in docs/http-contract.md.
const (
	// MaxAmount is the largest amount, in the currency's minor unit:
	// 2^53-1, the largest integer that every JSON parser reads exactly.
	MaxAmount = 1<<53 - 1
	// MaxCustomer is the longest customer, in characters.
	MaxCustomer = 255
	// MaxDescription is the longest description, in characters.
	MaxDescription = 1000
	// maxParamName is the longest unknown parameter name that a problem
	// repeats.
	maxParamName = 64
)

// ParseParams reads payment parameters from a JSON or form-encoded body.
// Every parameter is checked before anything is done with any of them:
// strings must be valid UTF-8 without control characters (a description
// may hold tabs and line breaks) and within their length limit, and the
// amount an integer from 1 to MaxAmount, read exactly.
func ParseParams(contentType string, body []byte) (Params, error) {
	src, err := readBody(contentType, body, known)
	if err != nil {
		return Params{}, err
	}
	return validate(src)
}

// readBody reads the parameters of a JSON or form-encoded body, refusing
// any parameter whose name is not one of names.
func readBody(contentType string, body []byte, names map[string]bool) (source, error) {
	media, _, _ := mime.ParseMediaType(contentType)
	switch {
	case media == "application/x-www-form-urlencoded":
		values, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, &ParamError{Param: "body", Reason: "is not a valid form body"}
		}
		fields := map[string]string{}
		for name, vs := range values {
			if err := checkName(names, name); err != nil {
				return nil, err
			}
			if len(vs) != 1 {
				return nil, &ParamError{Param: name, Reason: "must be given once"}
			}
			fields[name] = vs[0]
		}
		return formSource(fields), nil
	case media == "application/json" || strings.HasSuffix(media, "+json"):
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
			return nil, &ParamError{Param: "body", Reason: "must be a JSON object"}
		}
		for name := range raw {
			if err := checkName(names, name); err != nil {
				return nil, err
			}
		}
		return jsonSource(raw), nil
	default:
		return nil, &ParamError{Param: "body", Reason: "must be application/json or application/x-www-form-urlencoded"}
	}
}

var known = map[string]bool{"amount": true, "currency": true, "customer": true, "description": true}

// checkName rejects a parameter that is not one of names. A name that is
// empty, long or not printable is not repeated: the problem names the body.
func checkName(names map[string]bool, name string) error {
	switch {
	case names[name]:
		return nil
	case name == "":
		return &ParamError{Param: "body", Reason: "has a parameter with an empty name"}
	case len(name) > maxParamName || checkText(name, false) != "":
		return &ParamError{Param: "body", Reason: "has an unknown parameter whose name is too long or not printable"}
	}
	return &ParamError{Param: name, Reason: "is an unknown parameter"}
}

// source gives a parameter's value: a string, or for JSON a number token.
type source interface {
	// text returns a string parameter.
	text(name string) (v string, ok bool, err error)
	// number returns the amount's text: a form value, or a JSON number
	// token.
	number(name string) (v string, ok bool, err error)
}

type formSource map[string]string

func (f formSource) text(name string) (string, bool, error) {
	v, ok := f[name]
	return v, ok, nil
}

func (f formSource) number(name string) (string, bool, error) { return f.text(name) }

type jsonSource map[string]json.RawMessage

func (j jsonSource) text(name string) (string, bool, error) {
	m, ok := j[name]
	if !ok {
		return "", false, nil
	}
	// encoding/json turns invalid UTF-8 into U+FFFD; the raw member is
	// checked so that such a string is refused, not altered.
	if !utf8.Valid(m) {
		return "", true, &ParamError{Param: name, Reason: "must be valid UTF-8"}
	}
	var s string
	if err := json.Unmarshal(m, &s); err != nil {
		return "", true, &ParamError{Param: name, Reason: "must be a string"}
	}
	return s, true, nil
}

func (j jsonSource) number(name string) (string, bool, error) {
	m, ok := j[name]
	if !ok {
		return "", false, nil
	}
	d := json.NewDecoder(bytes.NewReader(m))
	d.UseNumber()
	var n any
	if err := d.Decode(&n); err != nil {
		return "", true, &ParamError{Param: name, Reason: "must be a number"}
	}
	num, isNumber := n.(json.Number)
	if !isNumber {
		return "", true, &ParamError{Param: name, Reason: "must be a number"}
	}
	return num.String(), true, nil
}

func validate(src source) (Params, error) {
	var p Params
	amount, ok, err := src.number("amount")
	switch {
	case err != nil:
		return Params{}, err
	case !ok:
		return Params{}, &ParamError{Param: "amount", Reason: "is required"}
	}
	if p.Amount, err = parseAmount(amount); err != nil {
		return Params{}, err
	}

	cur, ok, err := src.text("currency")
	switch {
	case err != nil:
		return Params{}, err
	case !ok:
		return Params{}, &ParamError{Param: "currency", Reason: "is required"}
	case len(cur) != 3 || !isLetters(cur):
		return Params{}, &ParamError{Param: "currency", Reason: "must be a three-letter ISO 4217 code"}
	}
	p.Currency = strings.ToLower(cur)

	cus, ok, err := src.text("customer")
	switch {
	case err != nil:
		return Params{}, err
	case !ok:
		return Params{}, &ParamError{Param: "customer", Reason: "is required"}
	}
	if reason := checkString(cus, 1, MaxCustomer, false); reason != "" {
		return Params{}, &ParamError{Param: "customer", Reason: reason}
	}
	p.Customer = cus

	desc, _, err := src.text("description")
	if err != nil {
		return Params{}, err
	}
	if reason := checkString(desc, 0, MaxDescription, true); reason != "" {
		return Params{}, &ParamError{Param: "description", Reason: reason}
	}
	p.Description = desc
	return p, nil
}

// checkString returns why s is not a valid string parameter of min to max
// characters, or "".
func checkString(s string, min, max int, lines bool) string {
	if reason := checkText(s, lines); reason != "" {
		return reason
	}
	if n := utf8.RuneCountInString(s); n < min || n > max {
		if min == 0 {
			return fmt.Sprintf("must be at most %d characters", max)
		}
		return fmt.Sprintf("must be %d to %d characters", min, max)
	}
	return ""
}

// checkText returns why s is not valid text, or "": it must be valid UTF-8
// without control characters (C0, DEL, C1), except tab, line feed and
// carriage return when lines is set.
func checkText(s string, lines bool) string {
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	for _, r := range s {
		if lines && (r == '\t' || r == '\n' || r == '\r') {
			continue
		}
		if unicode.IsControl(r) {
			return "must not contain control characters"
		}
	}
	return ""
}

// parseAmount reads an amount exactly from the text of a JSON number
// (RFC 8259 section 6), form values alike: 4200, 4200.0 and 4.2e3 are the
// same amount, as they are the same fingerprint; 0.5, 1e-1 and anything
// beyond MaxAmount are refused, never rounded.
func parseAmount(s string) (int64, error) {
	bad := &ParamError{Param: "amount", Reason: fmt.Sprintf("must be an integer from 1 to %d in the currency's minor unit", int64(MaxAmount))}
	digits, exp, ok := decimal(s)
	if !ok {
		return 0, bad
	}
	// digits × 10^exp, digits without leading zeros (or "" for zero).
	for exp < 0 {
		if !strings.HasSuffix(digits, "0") {
			return 0, bad // a fraction, or zero
		}
		digits, exp = digits[:len(digits)-1], exp+1
	}
	if digits == "" || len(digits)+exp > 16 {
		return 0, bad // zero, or beyond MaxAmount's 16 digits
	}
	n, err := strconv.ParseInt(digits+strings.Repeat("0", exp), 10, 64)
	if err != nil || n > MaxAmount {
		return 0, bad
	}
	return n, nil
}

// decimal splits the text of a JSON number into its significant digits
// (without leading zeros) and a power of ten; negative numbers are not
// read.
func decimal(s string) (digits string, exp int, ok bool) {
	i := 0
	intStart := i
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	intPart := s[intStart:i]
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return "", 0, false
	}
	var frac string
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if frac = s[start:i]; frac == "" {
			return "", 0, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		sign := 1
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			if s[i] == '-' {
				sign = -1
			}
			i++
		}
		start := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		e := s[start:i]
		if e == "" {
			return "", 0, false
		}
		e = strings.TrimLeft(e, "0")
		if len(e) > 6 {
			// |exponent| of a million or more: zero or far beyond
			// MaxAmount, unless the digits are absurdly long, which the
			// body limit prevents.
			if sign < 0 {
				return "", -1 << 30, true
			}
			return "", 1 << 30, true
		}
		if e != "" {
			n, _ := strconv.Atoi(e)
			exp = sign * n
		}
	}
	if i != len(s) {
		return "", 0, false
	}
	digits = strings.TrimLeft(intPart+frac, "0")
	return digits, exp - len(frac), true
}

func isLetters(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// NewID returns a new payment id: "pay_" and 26 random base32 characters
// (128 bits).
func NewID() string { return "pay_" + rand.Text() }
