package idemredis

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemkit/idem/idemstore"
)

// TestEncodeHeaderReadsBackAsJSONMarshal checks that json.Unmarshal reads
// what encodeHeader and encodeState write as it reads json.Marshal's, on
// the ASCII fast path and on json.Marshal's.
func TestEncodeHeaderReadsBackAsJSONMarshal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    http.Header
	}{
		{"Nil", nil},
		{"Empty", http.Header{}},
		{"Usual", http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"a", "b"}}},
		{"QuotesAndBackslashes", http.Header{"Etag": {`"v1"`, `W/"x\y"`}}},
		{"HTMLCharacters", http.Header{"Link": {"<https://a.example/?x=1&y=2>; rel=next"}}},
		{"NilAndEmptyValues", http.Header{"A": nil, "B": {}, "C": {""}}},
		{"NotASCII", http.Header{"X-Name": {"café", "\xff\xfe"}}},
		{"ControlCharacters", http.Header{"X-Tab": {"a\tb"}, "X-Nul": {"\x00"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := encodeHeader(tc.h)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, got, tc.h)
			st := idemstore.Recovery{Point: "p", State: map[string]string{}}
			for name, vs := range tc.h {
				if len(vs) > 0 {
					st.State[name] = vs[0]
				}
			}
			got, err = encodeState(st)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.State) == 0 {
				if got != "" {
					t.Fatalf("encodeState of no state = %q, want \"\"", got)
				}
				return
			}
			sameJSON(t, got, st.State)
		})
	}
}

// FuzzEncodeHeader checks encodeHeader against json.Marshal on any field.
func FuzzEncodeHeader(f *testing.F) {
	f.Add("Content-Type", "application/json", `"quoted" \ <&>`)
	f.Add("X", "\x01", "é")
	f.Fuzz(func(t *testing.T, name, v1, v2 string) {
		h := http.Header{name: {v1, v2}, "Other": {v2}}
		got, err := encodeHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, got, h)
		st, err := encodeState(idemstore.Recovery{State: map[string]string{name: v1, "other": v2}})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, st, map[string]string{name: v1, "other": v2})
	})
}

// sameJSON fails t unless got reads back as json.Marshal of want does.
func sameJSON[T any](t *testing.T, got string, want T) {
	t.Helper()
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var fromGot, fromWant T
	if err := json.Unmarshal([]byte(got), &fromGot); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal(b, &fromWant); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromGot, fromWant) {
		t.Fatalf("read back %#v from %s, want %#v (json.Marshal: %s)", fromGot, got, fromWant, b)
	}
}
