package idemfingerprint_test

import (
	"bytes"
	"fmt"

	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idemstore"
)

// A retry whose JSON body is formatted differently is the same request; a
// retry that changes the amount is not. Code that claims keys itself, such
// as a queue consumer calling idempg's Store.ClaimTx, puts Hash and Fields
// in its idemstore.ClaimParams; the stored fields name top-level members, never
// their values.
func ExampleNew() {
	request := func(body string) idemfingerprint.Params {
		return idemfingerprint.Params{
			Method:      "POST",
			Path:        "/v1/payments",
			ContentType: "application/json; charset=utf-8",
			Body:        []byte(body),
		}
	}

	var first idemfingerprint.Fingerprint
	first, err := idemfingerprint.New(request(`{"amount":4200,"currency":"eur","customer":"cus_123"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	retry, err := idemfingerprint.New(request(`{
		"customer": "cus_123",
		"currency": "eur",
		"amount": 4.2e3
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	changed, err := idemfingerprint.New(request(`{"amount":4300,"currency":"eur","customer":"cus_123"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	p := idemstore.ClaimParams{
		Scope:         idemstore.Scope{ClientID: "alice", Key: "order-7"},
		Method:        "POST",
		Path:          "/v1/payments",
		RequestHash:   first.Hash,
		RequestFields: first.Fields,
	}
	fmt.Println("retry is the same request:", bytes.Equal(retry.Hash, p.RequestHash))
	fmt.Println("changed is the same request:", bytes.Equal(changed.Hash, p.RequestHash))
	fmt.Println("the stored fields hold the amount:", bytes.Contains(p.RequestFields, []byte("4200")))

	_, err = idemfingerprint.New(request(`{"amount":1,"amount":2}`))
	fmt.Println(err)
	// Output:
	// retry is the same request: true
	// changed is the same request: false
	// the stored fields hold the amount: false
	// idem: duplicate member in JSON body: the JSON body names /amount more than once
}
