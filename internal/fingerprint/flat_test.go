package fingerprint

import (
	"bytes"
	"testing"

	"github.com/idemkit/idem/internal/race"
)

// TestFlat checks which bodies encodedFlat and flatJSON read, and that
// what they compute for those is what the encoder's path computes.
func TestFlat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body string
		flat bool
	}{
		{`{"amount":4200,"currency":"usd","customer":"cus_bench"}`, true},
		{`{"a":0,"b":true,"c":false,"d":null,"e":"","f":123456789012345}`, true},
		{`{"a}":1,"b{":"}","c,":":"}`, true},
		{`{"a":"` + "\x7f" + `"}`, true},
		{flatFields(maxFlatFields), true},
		{flatFields(maxFlatFields + 1), false},
		{`{}`, false},
		{`{"a":1234567890123456}`, false},
		{`{"a":01}`, false},
		{`{"a":-1}`, false},
		{`{"a":1.5}`, false},
		{`{"a":1e5}`, false},
		{`{"a":"\u0041"}`, false},
		{`{"a":"é"}`, false},
		{`{"a":{"b":1}}`, false},
		{`{"a":[1]}`, false},
		{`{"a": 1}`, false},
		{`{"a":1} `, false},
		{`{"a":1,}`, false},
		{`{"a":1}}`, false},
		{`{"b":1,"a":2}`, false},
		{`{"a":1,"a":2}`, false},
		{`{"ab":1,"a":2}`, false},
		{`{"":1}`, false},
		{"{\"a\x7f\":1}", false},
		{`{"a~":1}`, false},
		{`{"a/":1}`, false},
		{`{"<":1}`, false},
		{`{"é":1}`, false},
		{`[1]`, false},
		{`"a"`, false},
	} {
		p := Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(tt.body)}
		s := scratchPool.Get().(*scratch)
		var f Fingerprint
		fields, ok, scanned := s.encodedFlat(&p, &f)
		s.release()
		if ok != tt.flat || !scanned {
			t.Errorf("encodedFlat(%s) = %v, scanned %v; want %v", tt.body, ok, scanned, tt.flat)
			continue
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
// that it returns, for a flat body and for one that goes to the encoder.
func TestEncodedAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("sync.Pool drops scratches under the race detector")
	}
	for _, body := range []string{
		`{"amount":4200,"currency":"usd","customer":"cus_bench"}`,
		`{"amount": 4200, "metadata": {"b": 1, "a": [2.5, "x"]}, "currency": "usd"}`,
	} {
		p := Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(body)}
		Encoded(p) // fill a scratch's buffers
		if n := testing.AllocsPerRun(100, func() { Encoded(p) }); n != 1 {
			t.Errorf("Encoded(%s) allocates %v times, want 1", body, n)
		}
	}
}
