// Package benchbody holds the request bodies that the benchmarks of the
// middleware and of the fingerprint send, so that their figures are of the
// same bodies.
package benchbody

import (
	"bytes"
	"fmt"
	"net/url"
)

// JSON returns a payment request of about size bytes: a few top-level
// fields, nested metadata, and line items that make up the size.
func JSON(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"amount": 12500, "currency": "EUR", "customer": "cus_8e03978e40d5",` +
		` "description": "Order 2026-0042, \"express\" delivery",` +
		` "metadata": {"order_id": "ord_1234567890", "channel": "web", "retry": false, "weight_kg": 1.25},` +
		` "items": [`)
	for i := 0; b.Len() < size-40; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{"sku": "SKU-%05d", "qty": %d, "unit_price": %d.%02d}`, i, i%7+1, 100+i, i%100)
	}
	b.WriteString(`], "capture": true}`)
	return b.Bytes()
}

// Form returns a payment request as form data: 8 fields in 10 pairs, 248
// bytes.
func Form() []byte {
	v := url.Values{}
	v.Set("amount", "12500")
	v.Set("currency", "EUR")
	v.Set("customer", "cus_8e03978e40d5")
	v.Set("description", `Order 2026-0042, "express" delivery`)
	v.Set("metadata[order_id]", "ord_1234567890")
	v.Set("metadata[channel]", "web")
	v.Add("items[]", "SKU-00001")
	v.Add("items[]", "SKU-00002")
	v.Add("items[]", "SKU-00003")
	v.Set("capture", "true")
	return []byte(v.Encode())
}
