package fingerprint

import (
	"bytes"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/race"
)

// TestFlat checks which bodies encodedFlat and flatJSON read, and that
// what they compute for those is what the encoder's path computes.
func TestFlat(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tt := range []struct {
		body string
		flat bool
		// long is set for a flat body with a name or value whose length
		// takes more than a byte, which encodedFlat leaves to flatJSON.
		long bool
	}{
		{`{"` + long(126) + `":"` + long(125) + `"}`, true, false},
		{`{"` + long(127) + `":1}`, true, true},
		{`{"a":"` + long(126) + `","b":1}`, true, true},
		{`{"a":1,"b":"` + long(300) + `"}`, true, true},
		{`{"amount":4200,"currency":"usd","customer":"cus_bench"}`, true, false},
		{`{"a":0,"b":true,"c":false,"d":null,"e":"","f":123456789012345}`, true, false},
		{`{"a}":1,"b{":"}","c,":":"}`, true, false},
		{`{"a":"` + "\x7f" + `"}`, true, false},
		{flatFields(maxFlatFields), true, false},
		{flatFields(maxFlatFields + 1), false, false},
		{`{}`, false, false},
		{`{"a":1234567890123456}`, false, false},
		{`{"a":01}`, false, false},
		{`{"a":-1}`, false, false},
		{`{"a":1.5}`, false, false},
		{`{"a":1e5}`, false, false},
		{`{"a":"\u0041"}`, false, false},
		{`{"a":"é"}`, false, false},
		{`{"a":{"b":1}}`, false, false},
		{`{"a":[1]}`, false, false},
		{`{"a": 1}`, false, false},
		{`{"a":1} `, false, false},
		{`{"a":1,}`, false, false},
		{`{"a":1}}`, false, false},
		{`{"b":1,"a":2}`, false, false},
		{`{"a":1,"a":2}`, false, false},
		{`{"ab":1,"a":2}`, false, false},
		{`{"":1}`, false, false},
		{"{\"a\x7f\":1}", false, false},
		{`{"a~":1}`, false, false},
		{`{"a/":1}`, false, false},
		{`{"<":1}`, false, false},
		{`{"é":1}`, false, false},
		{`[1]`, false, false},
		{`"a"`, false, false},
	} {
		p := Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(tt.body)}
		s := scratchPool.Get().(*scratch)
		var f Fingerprint
		fields, ok, scanned := s.encodedFlat(&p, &f)
		s.release()
		if ok != (tt.flat && !tt.long) || scanned == tt.long {
			t.Errorf("encodedFlat(%s) = %v, scanned %v; want %v", tt.body, ok, scanned, tt.flat && !tt.long)
			continue
		}
		if tt.long {
			// Encoded reads it as flatJSON does.
			got, gotFields, err := Encoded(p)
			want, wantErr := fingerprintOf(p)
			if err != nil || wantErr != nil || got.Sum != want.Sum || !bytes.Equal(gotFields, want.encodeFields()) {
				t.Errorf("Encoded(%s) = %x %s, %v; flatJSON's %x %s, %v", tt.body, got.Sum, gotFields, err, want.Sum, want.encodeFields(), wantErr)
			}
		}
		var spans flatSpans
		if m, _ := scanFlat(p.Body, &spans); (m > 0) != tt.flat {
			t.Errorf("scanFlat(%s) = %d fields, want flat %v", tt.body, m, tt.flat)
		}
		// The encoder's path, told the body is not flat.
		s = scratchPool.Get().(*scratch)
		s.notFlat = true
		want, err := s.fingerprint(&p)
		s.notFlat = false
		wantFields := s.encodeFields(want.Kind)
		s.release()
		if !ok {
			continue
		}
		if err != nil {
			t.Errorf("the encoder's fingerprint of %s: %v", tt.body, err)
			continue
		}
		if f.Sum != want.Sum || f.Kind != want.Kind || !bytes.Equal(fields, wantFields) {
			t.Errorf("encodedFlat(%s) = %x %s %s, the encoder's %x %s %s", tt.body, f.Sum, f.Kind, fields, want.Sum, want.Kind, wantFields)
		}
		got, err := fingerprintOf(p)
		if err != nil || got.Sum != want.Sum || !bytes.Equal(got.encodeFields(), wantFields) {
			t.Errorf("fingerprintOf(%s) = %x %s, %v; the encoder's %x %s", tt.body, got.Sum, got.encodeFields(), err, want.Sum, wantFields)
		}
	}
}

// TestEncodedAllocs checks that Encoded allocates only the encoded fields
// that it returns, for a flat body, for one that goes to the encoder, and
// for a flat one that encodedFlat leaves to flatJSON.
func TestEncodedAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("sync.Pool drops scratches under the race detector")
	}
	for _, body := range []string{
		`{"amount":4200,"currency":"usd","customer":"cus_bench"}`,
		`{"amount": 4200, "metadata": {"b": 1, "a": [2.5, "x"]}, "currency": "usd"}`,
		`{"amount":4200,"description":"` + strings.Repeat("a", 200) + `"}`, // flat, left to flatJSON
	} {
		p := Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(body)}
		Encoded(p) // fill a scratch's buffers
		if n := testing.AllocsPerRun(100, func() { Encoded(p) }); n != 1 {
			t.Errorf("Encoded(%s) allocates %v times, want 1", body, n)
		}
	}
}
