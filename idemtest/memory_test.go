package idemtest_test

import (
	"bytes"
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunStoreTests(t, idemtest.Harness{
		NewStore: func(t *testing.T) idemstore.Store { return idemtest.NewMemoryStore() },
	})
}

// TestMemoryStoreSharesNoMemory checks that the store copies what it is
// given and what it returns: changing the response after Complete, or a
// record that Claim or Get returned, changes nothing stored, and
// appending to one header field's values never writes into another's.
func TestMemoryStoreSharesNoMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idemtest.NewMemoryStore()
	scope := idemstore.Scope{ClientID: "client-1", Key: "key-1"}
	params := idemstore.ClaimParams{
		Scope: scope, Method: "POST", Path: "/v1/payments",
		RequestHash: []byte("hash-0123456789"), RequestFields: []byte(`{"media":"json"}`),
		Now: time.Now(), LockTimeout: time.Minute, Retention: time.Hour,
	}
	res, err := store.Claim(ctx, params)
	if err != nil || res.Lease == nil {
		t.Fatalf("Claim = %+v, %v; want a lease", res, err)
	}
	params.RequestHash[0], params.RequestFields[0] = 'X', 'X'
	resp := &idemstore.Response{
		StatusCode: 201,
		Header:     http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/1"}, "Empty": {}, "Vary": {"A", "B", "C", "D"}},
		Body:       []byte(`{"id":"1"}`),
	}
	if err := res.Lease.Complete(ctx, resp); err != nil {
		t.Fatal(err)
	}
	resp.Header["Content-Type"][0], resp.Body[0] = "changed", 'X'
	want := idemstore.Record{
		RequestHash: []byte("hash-0123456789"), RequestFields: []byte(`{"media":"json"}`),
		Response: &idemstore.Response{
			StatusCode: 201,
			Header:     http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/1"}, "Empty": {}, "Vary": {"A", "B", "C", "D"}},
			Body:       []byte(`{"id":"1"}`),
		},
	}

	params.RequestHash, params.RequestFields = want.RequestHash, want.RequestFields
	res, err = store.Claim(ctx, params)
	if err != nil || res.Record == nil {
		t.Fatalf("Claim = %+v, %v; want the record", res, err)
	}
	got := res.Record
	checkStored := func(t *testing.T) {
		t.Helper()
		rec, ok := store.Get(scope)
		if !ok {
			t.Fatal("the key is gone")
		}
		if !bytes.Equal(rec.RequestHash, want.RequestHash) || !bytes.Equal(rec.RequestFields, want.RequestFields) ||
			!reflect.DeepEqual(rec.Response, want.Response) {
			t.Errorf("stored %q %q %+v, want %q %q %+v", rec.RequestHash, rec.RequestFields, rec.Response,
				want.RequestHash, want.RequestFields, want.Response)
		}
	}
	checkStored(t)
	if !reflect.DeepEqual(got.Response, want.Response) {
		t.Errorf("Claim returned %+v, want %+v", got.Response, want.Response)
	}

	// Appending to the returned slices must not write into their
	// neighbours, in the copy or in the store.
	_ = append(got.RequestHash, "XXXXXXXXXXXXXXXXXXXXXXXXX"...)
	_ = append(got.RequestFields, "XXXXXXXXXXXXXXXXXXXXXXXXX"...)
	got.Response.Header["Content-Type"] = append(got.Response.Header["Content-Type"], "x")
	got.Response.Header["Empty"] = append(got.Response.Header["Empty"], "x")
	got.Response.Header["Vary"] = append(got.Response.Header["Vary"], "x")
	if loc := got.Response.Header["Location"]; len(loc) != 1 || loc[0] != "/v1/payments/1" {
		t.Errorf("Location = %q after appending to other fields", loc)
	}
	if !bytes.Equal(got.RequestFields, want.RequestFields) || !bytes.Equal(got.Response.Body, want.Response.Body) {
		t.Errorf("appending to the hash changed the fields or body: %q %q", got.RequestFields, got.Response.Body)
	}
	got.RequestHash[0], got.RequestFields[0], got.Response.Body[0] = 'Y', 'Y', 'Y'
	got.Response.Header["Location"][0] = "changed"
	got.Response.Header["Vary"][0] = "changed"
	checkStored(t)
}
