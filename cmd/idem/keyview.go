package main

import (
	"encoding/base64"
	"encoding/hex"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keyspec"
)

// keyView is a key as the keys commands print it.
type keyView struct {
	Client       string     `json:"client"`
	Key          string     `json:"key"`
	KeyDigest    string     `json:"key_digest"`
	State        string     `json:"state"`
	Method       string     `json:"method"`
	Path         string     `json:"path"`
	RequestHash  string     `json:"request_hash"`
	Created      time.Time  `json:"created"`
	AgeSeconds   float64    `json:"age_seconds"`
	LockedAt     *time.Time `json:"locked_at,omitempty"`
	LeaseExpires *time.Time `json:"lease_expires,omitempty"`
	// LeaseRecorded is whether LeaseExpires is the expiry the store
	// recorded with the lease; otherwise it is LockedAt plus --lock-timeout.
	LeaseRecorded bool `json:"lease_expiry_recorded,omitempty"`
	// LeaseLive is whether a started key's holder may still be running.
	LeaseLive          bool                `json:"lease_live"`
	Token              int64               `json:"token"`
	ResponseStatus     int                 `json:"response_status,omitempty"`
	ResponseHeaders    map[string][]string `json:"response_headers,omitempty"`
	ResponseBody       *string             `json:"response_body,omitempty"`
	ResponseBodyBase64 string              `json:"response_body_base64,omitempty"`
}

func viewOf(rec *idemstore.Record, now time.Time, lockTimeout time.Duration, withBody bool) keyView {
	v := keyView{
		Client: rec.Scope.ClientID, Key: rec.Scope.Key, KeyDigest: keyspec.Digest(rec.Scope.Key),
		State: string(rec.Status), Method: rec.Method, Path: rec.Path, RequestHash: hex.EncodeToString(rec.RequestHash),
		Created: rec.CreatedAt.UTC(), AgeSeconds: now.Sub(rec.CreatedAt).Seconds(), Token: rec.Token,
	}
	if rec.Status == idemstore.StatusInFlight && !rec.LockedAt.IsZero() {
		locked, expires := rec.LockedAt.UTC(), rec.LeaseEnd(lockTimeout).UTC()
		v.LockedAt, v.LeaseExpires = &locked, &expires
		v.LeaseRecorded = !rec.LeaseExpires.IsZero()
		v.LeaseLive = now.Before(expires)
	}
	if resp := rec.Response; resp != nil {
		v.ResponseStatus, v.ResponseHeaders = resp.StatusCode, resp.Header
		if withBody {
			if utf8.Valid(resp.Body) {
				body := string(resp.Body)
				v.ResponseBody = &body
			} else {
				v.ResponseBodyBase64 = base64.StdEncoding.EncodeToString(resp.Body)
			}
		}
	}
	return v
}

// leaseText describes the lease of a key for a person.
func (v keyView) leaseText(now time.Time) string {
	switch {
	case v.State == string(idemstore.StatusCompleted):
		return "-"
	case v.LeaseExpires == nil:
		return "released"
	case v.LeaseLive:
		return "live, " + roundDuration(v.LeaseExpires.Sub(now)) + " left"
	}
	return "expired " + roundDuration(now.Sub(*v.LeaseExpires)) + " ago"
}

// leaseSource says where a held lease's expiry comes from.
func (v keyView) leaseSource(lockTimeout time.Duration) string {
	switch {
	case v.LeaseExpires == nil:
		return ""
	case v.LeaseRecorded:
		return " (expires " + v.LeaseExpires.Format(time.RFC3339) + ", as the store recorded)"
	}
	return " (the store recorded no expiry: assumed from --lock-timeout " + lockTimeout.String() + ")"
}
