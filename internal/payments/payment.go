// Package payments is the domain of the reference payments service: payment
// validation, the HTTP API, and the payment tables in SQLite and PostgreSQL.
package payments

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/url"
	"strconv"
	"strings"
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

const (
	maxCustomer    = 255
	maxDescription = 1000
)

// ParseParams reads payment parameters from a JSON or form-encoded body.
func ParseParams(contentType string, body []byte) (Params, error) {
	media, _, _ := mime.ParseMediaType(contentType)
	fields := map[string]string{}
	switch {
	case media == "application/x-www-form-urlencoded":
		values, err := url.ParseQuery(string(body))
		if err != nil {
			return Params{}, &ParamError{Param: "body", Reason: "the form body does not parse"}
		}
		for name, vs := range values {
			if len(vs) != 1 {
				return Params{}, &ParamError{Param: name, Reason: "must be given once"}
			}
			fields[name] = vs[0]
		}
		return validate(fields, nil)
	case media == "application/json" || strings.HasSuffix(media, "+json"):
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
			return Params{}, &ParamError{Param: "body", Reason: "must be a JSON object"}
		}
		return validate(nil, raw)
	default:
		return Params{}, &ParamError{Param: "body", Reason: "send application/json or application/x-www-form-urlencoded"}
	}
}

var known = map[string]bool{"amount": true, "currency": true, "customer": true, "description": true}

// validate checks form fields or JSON members; exactly one is non-nil.
func validate(form map[string]string, raw map[string]json.RawMessage) (Params, error) {
	names := make([]string, 0, len(form)+len(raw))
	for n := range form {
		names = append(names, n)
	}
	for n := range raw {
		names = append(names, n)
	}
	for _, n := range names {
		if !known[n] {
			return Params{}, &ParamError{Param: n, Reason: "unknown parameter"}
		}
	}
	str := func(name string) (string, bool, error) {
		if form != nil {
			v, ok := form[name]
			return v, ok, nil
		}
		m, ok := raw[name]
		if !ok {
			return "", false, nil
		}
		var s string
		if err := json.Unmarshal(m, &s); err != nil {
			return "", true, &ParamError{Param: name, Reason: "must be a string"}
		}
		return s, true, nil
	}
	var p Params
	amount, err := parseAmount(form, raw)
	if err != nil {
		return Params{}, err
	}
	p.Amount = amount

	cur, ok, err := str("currency")
	switch {
	case err != nil:
		return Params{}, err
	case !ok:
		return Params{}, &ParamError{Param: "currency", Reason: "is required"}
	case len(cur) != 3 || !isLetters(cur):
		return Params{}, &ParamError{Param: "currency", Reason: "must be a three-letter ISO 4217 code"}
	}
	p.Currency = strings.ToLower(cur)

	cus, ok, err := str("customer")
	switch {
	case err != nil:
		return Params{}, err
	case !ok:
		return Params{}, &ParamError{Param: "customer", Reason: "is required"}
	case cus == "" || utf8.RuneCountInString(cus) > maxCustomer || !utf8.ValidString(cus):
		return Params{}, &ParamError{Param: "customer", Reason: fmt.Sprintf("must be 1 to %d characters", maxCustomer)}
	}
	p.Customer = cus

	desc, _, err := str("description")
	if err != nil {
		return Params{}, err
	}
	if utf8.RuneCountInString(desc) > maxDescription || !utf8.ValidString(desc) {
		return Params{}, &ParamError{Param: "description", Reason: fmt.Sprintf("must be at most %d characters", maxDescription)}
	}
	p.Description = desc
	return p, nil
}

func parseAmount(form map[string]string, raw map[string]json.RawMessage) (int64, error) {
	bad := &ParamError{Param: "amount", Reason: "must be a positive integer in the currency's minor unit"}
	if form != nil {
		v, ok := form["amount"]
		if !ok {
			return 0, &ParamError{Param: "amount", Reason: "is required"}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return 0, bad
		}
		return n, nil
	}
	m, ok := raw["amount"]
	if !ok {
		return 0, &ParamError{Param: "amount", Reason: "is required"}
	}
	var f float64
	if err := json.Unmarshal(m, &f); err != nil {
		return 0, bad
	}
	// JSON has one number type; 4200, 4200.0 and 4.2e3 are the same amount,
	// as they are the same fingerprint. Beyond 2^53 doubles are inexact.
	if f <= 0 || f != math.Trunc(f) || f > 1<<53 {
		return 0, bad
	}
	return int64(f), nil
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
