package idemredis

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
