package idemoutbox_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemoutbox"
)

// The Standard Webhooks reference libraries' signing test vector.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignMatchesStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	key, err := idemoutbox.ParseSecret(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	got := idemoutbox.Sign(key, vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
	if got != vectorSignature {
		t.Fatalf("Sign = %s, want %s", got, vectorSignature)
	}
	// An independent computation of the same scheme agrees.
	m := hmac.New(sha256.New, key)
	m.Write([]byte(vectorID + "." + strconv.Itoa(vectorTimestamp) + "." + vectorBody))
	if want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); got != want {
		t.Fatalf("Sign = %s, independent HMAC = %s", got, want)
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "whsec_", "whsec_!!!", "not base64"} {
		if _, err := idemoutbox.ParseSecret(s); !errors.Is(err, idemoutbox.ErrInvalidSecret) {
			t.Errorf("ParseSecret(%q) = %v, want ErrInvalidSecret", s, err)
		}
	}
	s := idemoutbox.NewSecret()
	key, err := idemoutbox.ParseSecret(s)
	if err != nil || len(key) != 32 {
		t.Fatalf("ParseSecret(NewSecret()) = %d bytes, %v", len(key), err)
	}
	if s == idemoutbox.NewSecret() {
		t.Fatal("NewSecret returned the same secret twice")
	}
}

// TestParseSecretRefusesWeakOrUnprefixedSecrets holds the Standard
// Webhooks rule: "whsec_" and the base64 of 24 to 64 bytes. Before, a
// 1-byte secret and one without the prefix were accepted.
func TestParseSecretRefusesWeakOrUnprefixedSecrets(t *testing.T) {
	t.Parallel()
	secret := func(n int) string {
		return "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, n))
	}
	tests := []struct {
		name   string
		secret string
		want   string // in the error; "" accepts
	}{
		{"RefusesOneByte", "whsec_AA==", "decodes to 1 bytes"},
		{"RefusesEmptyKey", "whsec_", "decodes to 0 bytes"},
		{"Refuses23Bytes", secret(23), "decodes to 23 bytes"},
		{"Accepts24Bytes", secret(24), ""},
		{"Accepts64Bytes", secret(64), ""},
		{"Refuses65Bytes", secret(65), "decodes to 65 bytes"},
		{"RefusesMissingPrefix", secret(32)[len("whsec_"):], "does not start with whsec_"},
		{"RefusesOtherPrefix", "WHSEC_" + secret(32)[len("whsec_"):], "does not start with whsec_"},
		{"RefusesURLEncoding", "whsec_" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 32)), "not standard base64"},
		{"AcceptsTheDocumentedVector", vectorSecret, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key, err := idemoutbox.ParseSecret(tt.secret)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ParseSecret = %v, want the key", err)
				}
				return
			}
			if !errors.Is(err, idemoutbox.ErrInvalidSecret) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseSecret = %d bytes, %v; want ErrInvalidSecret saying %q", len(key), err, tt.want)
			}
			if enc := strings.TrimPrefix(tt.secret, "whsec_"); len(enc) > 4 && strings.Contains(err.Error(), enc) {
				t.Errorf("the error %q repeats the secret", err)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(vectorTimestamp, 0)
	header := func(mod func(http.Header)) http.Header {
		h := http.Header{}
		h.Set(idemoutbox.HeaderID, vectorID)
		h.Set(idemoutbox.HeaderTimestamp, strconv.Itoa(vectorTimestamp))
		h.Set(idemoutbox.HeaderSignature, vectorSignature)
		if mod != nil {
			mod(h)
		}
		return h
	}
	at := func(d time.Duration) *idemoutbox.VerifyOpts {
		return &idemoutbox.VerifyOpts{Now: func() time.Time { return now.Add(d) }}
	}
	tests := []struct {
		name   string
		secret string
		header http.Header
		body   string
		opts   *idemoutbox.VerifyOpts
		want   error
	}{
		{"AcceptsValid", vectorSecret, header(nil), vectorBody, at(0), nil},
		{"RejectsSecretWithoutPrefix", vectorSecret[len("whsec_"):], header(nil), vectorBody, at(0), idemoutbox.ErrInvalidSecret},
		{"AcceptsOneMatchAmongSeveral", vectorSecret, header(func(h http.Header) {
			h.Set(idemoutbox.HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,x "+vectorSignature)
		}), vectorBody, at(0), nil},
		{"AcceptsAtTolerance", vectorSecret, header(nil), vectorBody, at(5 * time.Minute), nil},
		{"RejectsChangedBody", vectorSecret, header(nil), `{"test": 2432232315}`, at(0), idemoutbox.ErrNoSignature},
		{"RejectsChangedID", vectorSecret, header(func(h http.Header) { h.Set(idemoutbox.HeaderID, "msg_other") }), vectorBody, at(0), idemoutbox.ErrNoSignature},
		{"RejectsOtherSecret", idemoutbox.NewSecret(), header(nil), vectorBody, at(0), idemoutbox.ErrNoSignature},
		{"RejectsOtherVersion", vectorSecret, header(func(h http.Header) {
			h.Set(idemoutbox.HeaderSignature, "v2"+vectorSignature[2:])
		}), vectorBody, at(0), idemoutbox.ErrNoSignature},
		{"RejectsReplayPastTolerance", vectorSecret, header(nil), vectorBody, at(5*time.Minute + time.Second), idemoutbox.ErrTimestampRange},
		{"RejectsFutureTimestamp", vectorSecret, header(nil), vectorBody, at(-5*time.Minute - time.Second), idemoutbox.ErrTimestampRange},
		{"HonoursTolerance", vectorSecret, header(nil), vectorBody, &idemoutbox.VerifyOpts{Tolerance: time.Hour, Now: func() time.Time { return now.Add(59 * time.Minute) }}, nil},
		{"RejectsBadTimestamp", vectorSecret, header(func(h http.Header) { h.Set(idemoutbox.HeaderTimestamp, "soon") }), vectorBody, at(0), idemoutbox.ErrBadTimestamp},
		{"RejectsMissingID", vectorSecret, header(func(h http.Header) { h.Del(idemoutbox.HeaderID) }), vectorBody, at(0), idemoutbox.ErrMissingHeader},
		{"RejectsMissingSignature", vectorSecret, header(func(h http.Header) { h.Del(idemoutbox.HeaderSignature) }), vectorBody, at(0), idemoutbox.ErrMissingHeader},
		{"RejectsInvalidSecret", "whsec_%%", header(nil), vectorBody, at(0), idemoutbox.ErrInvalidSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := idemoutbox.Verify(tt.secret, tt.header, []byte(tt.body), tt.opts)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if tt.want != nil && tt.want != idemoutbox.ErrInvalidSecret && !errors.Is(err, idemoutbox.ErrVerification) {
				t.Fatalf("Verify = %v, does not wrap ErrVerification", err)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(vectorID, strconv.Itoa(vectorTimestamp), vectorSignature, []byte(vectorBody))
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(idemoutbox.HeaderID, id)
		h.Set(idemoutbox.HeaderTimestamp, ts)
		h.Set(idemoutbox.HeaderSignature, sig)
		opts := &idemoutbox.VerifyOpts{Now: func() time.Time { return time.Unix(vectorTimestamp, 0) }}
		err := idemoutbox.Verify(vectorSecret, h, body, opts)
		if err == nil {
			// Only the real signature of this id, timestamp and body passes.
			key, _ := idemoutbox.ParseSecret(vectorSecret)
			m := hmac.New(sha256.New, key)
			m.Write([]byte(id + "." + ts + "."))
			m.Write(body)
			want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
			if !slices.Contains(strings.Fields(sig), want) {
				t.Fatalf("Verify accepted id=%q ts=%q sig=%q", id, ts, sig)
			}
		}
	})
}
