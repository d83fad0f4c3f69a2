package jcs_test

import (
	"errors"
	"fmt"

	"github.com/idemkit/idem/internal/jcs"
)

func ExampleCanonicalize() {
	out, err := jcs.Canonicalize([]byte(`{
		"currency": "EUR",
		"amount": 4.2e3,
		"customer": {"name": "Jos\u00e9", "id": "cus_123"}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))
	// Output:
	// {"amount":4200,"currency":"EUR","customer":{"id":"cus_123","name":"José"}}
}

func ExampleCanonicalize_duplicateMember() {
	_, err := jcs.Canonicalize([]byte(`{"amount":100,"meta":{"a":1,"a":2}}`))
	var dup *jcs.DuplicateMemberError
	if errors.As(err, &dup) {
		fmt.Println(dup.Pointer, errors.Is(err, jcs.ErrDuplicateMember))
	}
	// Output:
	// /meta/a true
}

func ExampleMembers() {
	members, err := jcs.Members([]byte(`{"currency":"EUR","amount":42.00,"tags":[ "a", "b" ]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range members {
		fmt.Printf("%s = %s\n", m.Name, m.Value)
	}
	// Output:
	// amount = 42
	// currency = "EUR"
	// tags = ["a","b"]
}
