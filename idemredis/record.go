package idemredis

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// recordFields are the hash's fields a record is read from, in the order
// decodeRecord takes them; the scripts send them in this order too.
var recordFields = []string{"c", "k", "m", "p", "rh", "rf", "st", "ca", "la", "le", "tok", "tc", "sc", "hd", "bd"}

// decodeRecord reads a record from the values of recordFields. A nil
// body (bd not read) gives a response with an empty body.
func decodeRecord(v []any) (*idemstore.Record, error) {
	if len(v) < len(recordFields)-1 {
		return nil, fmt.Errorf("record of %d fields, want %d", len(v), len(recordFields))
	}
	str := func(i int) string {
		if i >= len(v) {
			return ""
		}
		s, _ := v[i].(string)
		return s
	}
	if str(6) == "" {
		return nil, errors.New("the key vanished while it was read")
	}
	rec := &idemstore.Record{
		Scope:  idemstore.Scope{ClientID: str(0), Key: str(1)},
		Method: str(2), Path: str(3),
		RequestHash: []byte(str(4)), RequestFields: []byte(str(5)),
		Status: idemstore.Status(str(6)),
	}
	var err error
	micro := func(i int) time.Time {
		s := str(i)
		if s == "" {
			return time.Time{}
		}
		n, e := strconv.ParseInt(s, 10, 64)
		err = errors.Join(err, e)
		return time.UnixMicro(n).UTC()
	}
	rec.CreatedAt, rec.LockedAt, rec.LeaseExpires = micro(7), micro(8), micro(9)
	tok, e := strconv.ParseInt(str(10), 10, 64)
	err = errors.Join(err, e)
	rec.Token, rec.TraceContext = tok, str(11)
	if rec.Status == idemstore.StatusCompleted {
		code, e := strconv.Atoi(str(12))
		err = errors.Join(err, e)
		var h http.Header
		if hd := str(13); hd != "" && hd != "null" {
			err = errors.Join(err, json.Unmarshal([]byte(hd), &h))
		}
		rec.Response = &idemstore.Response{StatusCode: code, Header: h, Body: []byte(str(14))}
	}
	if err != nil {
		return nil, fmt.Errorf("decode key %q of %q: %w", rec.Scope.Key, rec.Scope.ClientID, err)
	}
	return rec, nil
}

// encodeHeader is the hash's hd field of h: JSON, as json.Marshal writes
// it and json.Unmarshal reads it back ("null" for a nil header), without
// reflection for the usual header of ASCII fields.
func encodeHeader(h http.Header) (string, error) {
	if h == nil {
		return "null", nil
	}
	b := make([]byte, 0, 256)
	b = append(b, '{')
	var arr [16]string
	for i, name := range sortedKeys(arr[:], h) {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendString(b, name); !ok {
			return marshal(h)
		}
		b = append(b, ':')
		vs := h[name]
		if vs == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '[')
		for j, v := range vs {
			if j > 0 {
				b = append(b, ',')
			}
			if b, ok = appendString(b, v); !ok {
				return marshal(h)
			}
		}
		b = append(b, ']')
	}
	return string(append(b, '}')), nil
}

// encodeState is the hash's rs field of r: its state as JSON, as
// encodeHeader writes it, "" for none.
func encodeState(r idemstore.Recovery) (string, error) {
	if len(r.State) == 0 {
		return "", nil
	}
	b := make([]byte, 0, 128)
	b = append(b, '{')
	var arr [8]string
	for i, name := range sortedKeys(arr[:], r.State) {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendString(b, name); ok {
			b = append(b, ':')
			b, ok = appendString(b, r.State[name])
		}
		if !ok {
			return marshal(r.State)
		}
	}
	return string(append(b, '}')), nil
}

// sortedKeys returns the keys of m in order, in keys when it is long
// enough.
func sortedKeys[V any](keys []string, m map[string]V) []string {
	keys = keys[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func marshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// appendString appends s to b as a JSON string, and reports false, for
// json.Marshal to write it, when s holds a control character or a byte
// beyond ASCII (which json.Marshal escapes or checks as UTF-8).
func appendString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x80:
			return b, false
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		default:
			b = append(b, c)
		}
	}
	return append(b, '"'), true
}
