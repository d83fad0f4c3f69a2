package fingerprint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/benchbody"
)

// BenchmarkFingerprint measures the fingerprint alone, the largest part of
// the middleware's own cost: for the payment of 55 bytes that idem bench
// sends (small), and for a JSON payment of about 1 KiB.
func BenchmarkFingerprint(b *testing.B) {
	small := Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(`{"amount":4200,"currency":"usd","customer":"cus_bench"}`)}
	b.Run("small", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, _, err := Encoded(small); err != nil {
				b.Fatal(err)
			}
		}
	})
	var body strings.Builder
	body.WriteString(`{"amount": 12500, "currency": "EUR", "customer": "cus_8e03978e40d5", "metadata": {"order_id": "ord_1234567890", "channel": "web"}, "items": [`)
	for i := 0; body.Len() < 1000; i++ {
		if i > 0 {
			body.WriteString(", ")
		}
		fmt.Fprintf(&body, `{"sku": "SKU-%05d", "qty": %d, "unit_price": %d.%02d}`, i, i%7+1, 100+i, i%100)
	}
	body.WriteString(`], "capture": true}`)
	p := Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(body.String())}
	b.Run("fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, _, err := Encoded(p); err != nil { // the middleware's
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := refFingerprintOf(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("canonical", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := canonicalForm.Canonicalize(p.Body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncoded measures Encoded on the bodies of idem bench (small)
// and of the middleware's benchmarks (json-1KiB, form), to be run under
// callgrind with two counts whose difference gives the instructions of
// one call.
func BenchmarkEncoded(b *testing.B) {
	for _, p := range []struct {
		name string
		p    Params
	}{
		{"small", Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(`{"amount":4200,"currency":"usd","customer":"cus_bench"}`)}},
		{"json-1KiB", Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: benchbody.JSON(1 << 10)}},
		{"form", Params{Method: "POST", Path: "/v1/payments", ContentType: "application/x-www-form-urlencoded", Body: benchbody.Form()}},
	} {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, _, err := Encoded(p.p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
