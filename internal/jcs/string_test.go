package jcs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unicode/utf16"
)

func TestAppendQuotedEscapesOnlyWhatRFC8785Requires(t *testing.T) {
	t.Parallel()

	short := map[rune]string{'\b': `\b`, '\t': `\t`, '\n': `\n`, '\f': `\f`, '\r': `\r`, '"': `\"`, '\\': `\\`}
	for r := rune(0); r < 0x300; r++ {
		want, ok := short[r]
		switch {
		case ok:
		case r < 0x20:
			want = fmt.Sprintf(`\u%04x`, r)
		default:
			want = string(r)
		}
		got := string(appendQuoted(nil, []byte(string(r))))
		if got != `"`+want+`"` {
			t.Errorf("appendQuoted(U+%04X) = %s, want %q", r, got, `"`+want+`"`)
		}
	}

	t.Run("Mixed", func(t *testing.T) {
		t.Parallel()
		in := "a\"b\\c\x01d\u20ac\U0001f600"
		want := `"a\"b\\c\u0001d` + "\u20ac\U0001f600" + `"`
		if got := string(appendQuoted(nil, []byte(in))); got != want {
			t.Errorf("appendQuoted(%q) = %s, want %s", in, got, want)
		}
	})
}

func TestCompareUTF16(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		a, b string
		want int // sign of the result
	}{
		{name: "Equal", a: "abc", b: "abc", want: 0},
		{name: "BothEmpty", a: "", b: "", want: 0},
		{name: "EmptyFirst", a: "", b: "a", want: -1},
		{name: "PrefixFirst", a: "ab", b: "abc", want: -1},
		{name: "ASCII", a: "b", b: "a", want: 1},
		{name: "UppercaseFirst", a: "Z", b: "a", want: -1},
		{name: "TwoByteAfterASCII", a: "\u00f6", b: "z", want: 1},
		{name: "BelowSurrogatesBeforeSupplementary", a: "\ud7ff", b: "\U00010000", want: -1},
		{name: "SupplementaryBeforePrivateUse", a: "\U0001f600", b: "\ue000", want: -1},
		{name: "SupplementaryBeforeFB33", a: "\U0001f600", b: "\ufb33", want: -1},
		{name: "SupplementaryBeforeFFFF", a: "\U0010ffff", b: "\uffff", want: -1},
		{name: "SupplementaryOrder", a: "\U0001f601", b: "\U0001f600", want: 1},
		{name: "DifferenceAfterCommonLeadByte", a: "x\u00e9", b: "x\u00ff", want: -1},
		{name: "DifferenceInLastByte", a: "\u20ac", b: "\u20ad", want: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := compareUTF16([]byte(tt.a), []byte(tt.b))
			if sign(got) != tt.want {
				t.Errorf("compareUTF16(%q, %q) = %d, want sign %d", tt.a, tt.b, got, tt.want)
			}
			if back := compareUTF16([]byte(tt.b), []byte(tt.a)); sign(back) != -tt.want {
				t.Errorf("compareUTF16(%q, %q) = %d, want sign %d", tt.b, tt.a, back, -tt.want)
			}
		})
	}

	t.Run("MatchesUTF16Encoding", func(t *testing.T) {
		t.Parallel()
		// Characters from every range whose UTF-8 and UTF-16 orders could
		// disagree.
		alphabet := []rune{'a', 'b', 0x7f, 0x80, 0xff, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfb33, 0xffff, 0x10000, 0x1f600, 0x10ffff}
		rng := rand.New(rand.NewPCG(3, 2))
		randString := func() string {
			r := make([]rune, rng.IntN(4))
			for i := range r {
				r[i] = alphabet[rng.IntN(len(alphabet))]
			}
			return string(r)
		}
		for range 20000 {
			a, b := randString(), randString()
			want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			if got := compareUTF16([]byte(a), []byte(b)); sign(got) != want {
				t.Fatalf("compareUTF16(%q, %q) = %d, want sign %d", a, b, got, want)
			}
		}
	})
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// TestPlainEnd checks plainEnd against plainASCII, a byte at a time, for
// every byte at every position of a run, and for random texts.
func TestPlainEnd(t *testing.T) {
	t.Parallel()
	slow := func(src []byte, i int) int {
		for i < len(src) && plainASCII[src[i]] {
			i++
		}
		return i
	}
	for c := range 256 {
		for n := range 20 {
			for at := range n {
				src := bytes.Repeat([]byte{'a'}, n)
				src[at] = byte(c)
				for start := range n {
					if got, want := plainEnd(src, start), slow(src, start); got != want {
						t.Fatalf("plainEnd(%q, %d) = %d, want %d", src, start, got, want)
					}
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 64)
	for range 100000 {
		for i := range src {
			// Mostly plain bytes, some of the others.
			src[i] = byte(0x20 + rng.IntN(0x60))
			if rng.IntN(16) == 0 {
				src[i] = byte(rng.IntN(256))
			}
		}
		start := rng.IntN(len(src))
		if got, want := plainEnd(src, start), slow(src, start); got != want {
			t.Fatalf("plainEnd(%q, %d) = %d, want %d", src, start, got, want)
		}
	}
}
