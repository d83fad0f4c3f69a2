package jcs

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// appendixB is the number serialisation table of RFC 8785 Appendix B, less
// NaN and the infinities, which JSON cannot express.
var appendixB = []struct {
	bits uint64
	want string
}{
	{0x0000000000000000, "0"},
	{0x8000000000000000, "0"},
	{0x0000000000000001, "5e-324"},
	{0x8000000000000001, "-5e-324"},
	{0x7fefffffffffffff, "1.7976931348623157e+308"},
	{0xffefffffffffffff, "-1.7976931348623157e+308"},
	{0x4340000000000000, "9007199254740992"},
	{0xc340000000000000, "-9007199254740992"},
	{0x4430000000000000, "295147905179352830000"},
	{0x44b52d02c7e14af5, "9.999999999999997e+22"},
	{0x44b52d02c7e14af6, "1e+23"},
	{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
	{0x444b1ae4d6e2ef4e, "999999999999999700000"},
	{0x444b1ae4d6e2ef4f, "999999999999999900000"},
	{0x444b1ae4d6e2ef50, "1e+21"},
	{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
	{0x3eb0c6f7a0b5ed8d, "0.000001"},
	{0x41b3de4355555553, "333333333.3333332"},
	{0x41b3de4355555554, "333333333.33333325"},
	{0x41b3de4355555555, "333333333.3333333"},
	{0x41b3de4355555556, "333333333.3333334"},
	{0x41b3de4355555557, "333333333.33333343"},
	{0xbecbf647612f3696, "-0.0000033333333333333333"},
	{0x43143ff3c1cb0959, "1424953923781206.2"},
	// Not in the table, but on the boundaries of ECMAScript's layouts.
	{0x3e7ad7f29abcaf48, "1e-7"},
	{0x3e7ad7f29abcaf47, "9.999999999999998e-8"},
	{0x3ff0000000000000, "1"},
	{0x3fb999999999999a, "0.1"},
	{0x4415af1d78b58c40, "100000000000000000000"},
	{0x3fe0000000000000, "0.5"},
	{0x7fe0000000000000, "8.98846567431158e+307"},
	{0x0010000000000000, "2.2250738585072014e-308"},
}

func TestAppendNumberAppendixB(t *testing.T) {
	t.Parallel()
	for _, tt := range appendixB {
		t.Run(strconv.FormatUint(tt.bits, 16), func(t *testing.T) {
			t.Parallel()
			f := math.Float64frombits(tt.bits)
			if got := string(appendNumber(nil, f)); got != tt.want {
				t.Errorf("appendNumber(%016x) = %s, want %s", tt.bits, got, tt.want)
			}
		})
	}
}

func TestCanonicalizeNumberAppendixB(t *testing.T) {
	t.Parallel()
	for _, tt := range appendixB {
		f := math.Float64frombits(tt.bits)
		// Each value is fed in three spellings that read back to the same
		// double but differ from the canonical text, so the parser is
		// exercised as well as the formatter.
		spellings := []string{
			strconv.FormatFloat(f, 'e', 16, 64),
			strconv.FormatFloat(f, 'E', -1, 64),
			strings.Replace(strconv.FormatFloat(f, 'e', 20, 64), "e", "0e", 1),
		}
		for _, in := range spellings {
			t.Run(in, func(t *testing.T) {
				t.Parallel()
				got, err := Canonicalize([]byte(in))
				if err != nil {
					t.Fatalf("Canonicalize(%s) error = %v", in, err)
				}
				if string(got) != tt.want {
					t.Errorf("Canonicalize(%s) = %s, want %s", in, got, tt.want)
				}
			})
		}
	}
}

// ecmaNumber is a second, independent reading of ECMAScript's
// Number::toString: fixed notation from 1e-6 up to 1e21, otherwise exponent
// notation with no leading zeros in the exponent.
func ecmaNumber(f float64) string {
	if f == 0 {
		return "0"
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(s, "e")
	sign, digits := exp[:1], strings.TrimLeft(exp[1:], "0")
	return mant + "e" + sign + digits
}

func TestAppendNumberMatchesECMAScriptRules(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(8785, 1))
	// Random bit patterns cover every exponent; random decimals near the
	// layout boundaries cover the switches between notations.
	const n = 200000
	for i := range n {
		var f float64
		if i%2 == 0 {
			f = math.Float64frombits(rng.Uint64())
		} else {
			f = (rng.Float64() + 0.5) * math.Pow10(rng.IntN(60)-30)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		got := string(appendNumber(nil, f))
		if want := ecmaNumber(f); got != want {
			t.Fatalf("appendNumber(%016x) = %s, want %s", math.Float64bits(f), got, want)
		}
		back, err := strconv.ParseFloat(got, 64)
		if err != nil || back != f {
			t.Fatalf("appendNumber(%016x) = %s, which reads back as %v, %v", math.Float64bits(f), got, back, err)
		}
	}
}

func TestExactNumbers(t *testing.T) {
	exact := Options{ExactNumbers: true}
	tests := []struct{ in, rfc, exact string }{
		// A double holds these exactly enough: RFC 8785's form.
		{"4200", "4200", "4200"},
		{"4200.0", "4200", "4200"},
		{"4.2e3", "4200", "4200"},
		{"0.1", "0.1", "0.1"},
		{"19.99", "19.99", "19.99"},
		{"-0.0", "0", "0"},
		{"0e10", "0", "0"},
		{"1e21", "1e+21", "1e+21"},
		{"1E23", "1e+23", "1e+23"},
		{"1.5e-7", "1.5e-7", "1.5e-7"},
		{"9007199254740992", "9007199254740992", "9007199254740992"},
		{"123456789012345680000", "123456789012345680000", "123456789012345680000"},
		// A double would change their value: the exact form.
		{"9007199254740993", "9007199254740992", "9007199254740993"},
		{"1234567890123456789", "1234567890123456800", "1234567890123456789"},
		{"-1234567890123456789.50", "-1234567890123456800", "-12345678901234567895e-1"},
		{"0.1000000000000000055511151231257827", "0.1", "1000000000000000055511151231257827e-34"},
		{"12345678901234567890123", "1.2345678901234568e+22", "12345678901234567890123"},
		{"1e-400", "0", "1e-400"},
		{"2.50e-400", "0", "25e-401"},
	}
	for _, tt := range tests {
		if got, err := Canonicalize([]byte(tt.in)); err != nil || string(got) != tt.rfc {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", tt.in, got, err, tt.rfc)
		}
		if got, err := exact.Canonicalize([]byte(tt.in)); err != nil || string(got) != tt.exact {
			t.Errorf("exact Canonicalize(%s) = %s, %v; want %s", tt.in, got, err, tt.exact)
		}
	}

	// Numbers of different value never share a form; equal ones always do.
	forms := map[string]string{}
	for _, tt := range tests {
		out, _ := exact.Canonicalize([]byte(tt.in))
		value, ok := new(big.Rat).SetString(tt.in)
		if !ok {
			t.Fatalf("big.Rat cannot read %s", tt.in)
		}
		if prev, seen := forms[string(out)]; seen {
			if pv, _ := new(big.Rat).SetString(prev); pv.Cmp(value) != 0 {
				t.Errorf("%s and %s differ in value but share the form %s", prev, tt.in, out)
			}
		}
		forms[string(out)] = tt.in
	}

	members, err := exact.Members([]byte(`{"b":9007199254740993,"a":4.2e3}`))
	if err != nil || len(members) != 2 || string(members[0].Value) != "4200" || string(members[1].Value) != "9007199254740993" {
		t.Errorf("exact Members = %+v, %v", members, err)
	}
	if _, err := exact.Canonicalize([]byte("1e-1000000000000000")); !errors.Is(err, ErrNumber) {
		t.Errorf("exact Canonicalize of an exponent of 16 digits: err %v, want ErrNumber", err)
	}
}

// slowNumber is the canonical form of a JSON number by way of a double, as
// number writes every number that appendShortDecimal does not take.
func slowNumber(t *testing.T, text string) string {
	t.Helper()
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		t.Fatalf("ParseFloat(%q) error = %v", text, err)
	}
	return string(appendNumber(nil, f))
}

// checkShortDecimal checks that appendShortDecimal writes what the way by a
// double writes, whenever it takes a number, and that Canonicalize, in
// both forms, writes the same.
func checkShortDecimal(t *testing.T, text string) {
	t.Helper()
	got, ok := appendShortDecimal([]byte("x"), []byte(text))
	if !ok {
		return
	}
	if want := slowNumber(t, text); string(got) != "x"+want {
		t.Fatalf("appendShortDecimal(%q) = %q, by a double %q", text, got[1:], want)
	}
	exact, err := Options{ExactNumbers: true}.Canonicalize([]byte(text))
	if err != nil || string(exact) != string(got[1:]) {
		t.Fatalf("exact Canonicalize(%q) = %q, %v, want %q", text, exact, err, got[1:])
	}
	rfc, err := Canonicalize([]byte(text))
	if err != nil || string(rfc) != string(got[1:]) {
		t.Fatalf("Canonicalize(%q) = %q, %v, want %q", text, rfc, err, got[1:])
	}
}

func TestAppendShortDecimal(t *testing.T) {
	t.Parallel()

	tests := []struct {
		text string
		want string // "" when the number is not taken
	}{
		{"100.50", "100.5"},
		{"100.00", "100"},
		{"-0.0", "0"},
		{"0.000", "0"},
		{"0.05", "0.05"},
		{"0.000001", "0.000001"},
		{"0.0000001", ""}, // 1e-7
		{"1.5e3", ""},
		{"123456789012.345", "123456789012.345"},
		{"1234567890123.456", ""}, // 16 digits
		{"100000000000000000000.0", "100000000000000000000"},
		{"1000000000000000000000.0", ""}, // 1e21
		{"-3.14159", "-3.14159"},
		{"0.1000000000000000055511151231257827", ""},
		{"2.50000000000000000000000000000000001", ""},
		{"7.0000000000000000000000000000000000", "7"},
	}
	for _, tt := range tests {
		got, ok := appendShortDecimal(nil, []byte(tt.text))
		if ok != (tt.want != "") || string(got) != tt.want {
			t.Errorf("appendShortDecimal(%q) = %q, %v, want %q", tt.text, got, ok, tt.want)
		}
		checkShortDecimal(t, tt.text)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var b []byte
		if rng.IntN(4) == 0 {
			b = append(b, '-')
		}
		intDigits := rng.IntN(23)
		if intDigits == 0 {
			b = append(b, '0')
		} else {
			b = append(b, byte('1'+rng.IntN(9)))
			for range intDigits - 1 {
				b = append(b, randomDigit(rng))
			}
		}
		b = append(b, '.')
		for range 1 + rng.IntN(20) {
			b = append(b, randomDigit(rng))
		}
		checkShortDecimal(t, string(b))
	}
}

// randomDigit returns a digit, zero more often than the others.
func randomDigit(rng *rand.Rand) byte {
	if rng.IntN(3) == 0 {
		return '0'
	}
	return byte('0' + rng.IntN(10))
}

func FuzzAppendShortDecimal(f *testing.F) {
	for _, s := range []string{"100.50", "0.000001", "-0.0", "123456789012.345", "100000000000000000000.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if text == "" || strings.Trim(text, "0123456789.eE+-") != "" || !json.Valid([]byte(text)) {
			return // not one JSON number
		}
		checkShortDecimal(t, text)
	})
}
