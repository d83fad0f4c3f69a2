package idemwebhook_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemwebhook"
)

// FuzzVerify: whatever the headers and body, the verifiers return an
// event or a *VerifyError, never panic, and accept nothing unsigned.
func FuzzVerify(f *testing.F) {
	now := time.Unix(1767225600, 0)
	body := stripeEvent("evt_1", 1767225590)
	f.Add("t=1767225600,v1="+stripeSign(stripeSecret, now, body), body, vectorID, "1767225600", vectorSignature)
	f.Add("t=1,t=2,v1=zz", "{}", "", "x", "v1,")
	f.Add(",,=,v1==", `{"id":7}`, "msg", "-1", "v1,AAAA v1")
	stripe, err := idemwebhook.NewStripe([]string{stripeSecret}, nil)
	if err != nil {
		f.Fatal(err)
	}
	standard, err := idemwebhook.NewStandardWebhooks([]string{vectorSecret}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, stripeHeader, body, id, ts, sig string) {
		h := http.Header{}
		h.Set(idemwebhook.HeaderStripeSignature, stripeHeader)
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		for _, v := range []idemwebhook.Verifier{stripe, standard} {
			ev, err := v.Verify(h, []byte(body), now)
			var ve *idemwebhook.VerifyError
			switch {
			case err == nil && ev.ID == "":
				t.Fatalf("%T accepted a delivery without an event id", v)
			case err != nil && (!errors.As(err, &ve) || ve.Reason == ""):
				t.Fatalf("%T: %v is not a VerifyError with a reason", v, err)
			}
		}
	})
}
