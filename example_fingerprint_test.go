package idem_test

import (
	"fmt"

	"github.com/idemkit/idem"
)

// A retry whose JSON body is formatted differently is the same request; a
// retry that changes the amount is not, and DiffFields names the field
// without revealing its value.
func ExampleNewFingerprint() {
	request := func(body string) idem.FingerprintParams {
		return idem.FingerprintParams{
			Method:      "POST",
			Path:        "/v1/payments",
			ContentType: "application/json; charset=utf-8",
			Body:        []byte(body),
		}
	}

	first, err := idem.NewFingerprint(request(`{"amount":4200,"currency":"eur","customer":"cus_123"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	retry, err := idem.NewFingerprint(request(`{
		"customer": "cus_123",
		"currency": "eur",
		"amount": 4.2e3
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	changed, err := idem.NewFingerprint(request(`{"amount":4300,"currency":"eur","customer":"cus_123"}`))
	if err != nil {
		fmt.Println(err)
		return
	}

	// A store keeps first.Sum and first.EncodeFields() with the key.
	stored := first.EncodeFields()
	fmt.Println("retry is the same request:", retry.Sum == first.Sum)
	fmt.Println("retry differs in:", idem.DiffFields(stored, retry))
	fmt.Println("changed is the same request:", changed.Sum == first.Sum)
	fmt.Println("changed differs in:", idem.DiffFields(stored, changed))
	// Output:
	// retry is the same request: true
	// retry differs in: []
	// changed is the same request: false
	// changed differs in: [/amount]
}
