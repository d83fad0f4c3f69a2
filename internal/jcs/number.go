package jcs

import (
	"bytes"
	"fmt"
	"strconv"
)

// maxExactDigits is the number of digits below which every integer is exact
// in a double (10^15 < 2^53), so its JSON text is already canonical.
const maxExactDigits = 15

// number reads the JSON number at p.pos and appends its canonical form to dst.
func (p *parser) number(dst []byte) ([]byte, error) {
	src := p.src
	start := p.pos
	i := start
	if src[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i < len(src) && src[i] == '0':
		i++
	case i < len(src) && isDigit(src[i]):
		for i < len(src) && isDigit(src[i]) {
			i++
		}
	default:
		return nil, p.syntaxErrorAt(i, "invalid number: missing digits")
	}
	intDigits := i - intStart
	plain := true
	fracDigits := 0
	if i < len(src) && src[i] == '.' {
		plain = false
		i++
		if i >= len(src) || !isDigit(src[i]) {
			return nil, p.syntaxErrorAt(i, "invalid number: missing digits after decimal point")
		}
		for i < len(src) && isDigit(src[i]) {
			i++
		}
		fracDigits = i - intStart - intDigits - 1
	}
	exponent := i < len(src) && (src[i] == 'e' || src[i] == 'E')
	if exponent {
		plain = false
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i >= len(src) || !isDigit(src[i]) {
			return nil, p.syntaxErrorAt(i, "invalid number: missing digits in exponent")
		}
		for i < len(src) && isDigit(src[i]) {
			i++
		}
	}
	p.pos = i
	text := src[start:i]

	if plain && intDigits <= maxExactDigits {
		// A short integer is exact and has no leading zeros (the grammar
		// forbids them), so it is its own canonical form, except -0.
		if text[0] == '-' && text[1] == '0' {
			return append(dst, '0'), nil
		}
		return append(dst, text...), nil
	}
	if fracDigits > 0 && !exponent && src[intStart] != '0' && src[i-1] != '0' && intDigits+fracDigits <= maxExactDigits {
		// A decimal such as 100.25: no exponent, no leading zero, no
		// trailing zero after the point, and few enough digits that its
		// double is printed back with the same digits. It is its own
		// canonical form, as appendShortDecimal would write it.
		return append(dst, text...), nil
	}
	if out, ok := appendShortDecimal(dst, text); ok {
		return out, nil
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		// The grammar has been checked, so only a range error is possible:
		// the magnitude rounds to infinity. Underflow reads as zero without
		// an error, as in ECMAScript.
		if len(text) > 40 {
			text = text[:40]
		}
		return nil, fmt.Errorf("%w: %s at offset %d", ErrNumber, text, start)
	}
	out := appendNumber(dst, f)
	if !p.exact {
		return out, nil
	}
	// Digits of up to 32 bytes, which every double's shortest form fits in,
	// need no allocation.
	var wantDigits, gotDigits [32]byte
	want, ok := parseDecimal(wantDigits[:0], text)
	if !ok {
		return nil, fmt.Errorf("%w: exponent of %.40s at offset %d", ErrNumber, text, start)
	}
	if got, _ := parseDecimal(gotDigits[:0], out[len(dst):]); got.equal(want) {
		return out, nil
	}
	return want.appendTo(dst), nil
}

// decimal is the exact value of a decimal number: digits × 10^exp, with no
// leading or trailing zeros in digits; zero has no digits.
type decimal struct {
	neg    bool
	digits []byte
	exp    int64
}

// maxExponentDigits bounds the exponent of a number read exactly; a longer
// one is out of any useful range.
const maxExponentDigits = 15

// parseDecimal reads the exact value of s, which has the JSON number
// grammar, with its digits appended to buf. ok is false when the exponent
// has more than maxExponentDigits digits.
func parseDecimal(buf, s []byte) (d decimal, ok bool) {
	i := 0
	if s[i] == '-' {
		d.neg = true
		i++
	}
	digits := buf
	var fraction int64
	for ; i < len(s) && isDigit(s[i]); i++ {
		digits = append(digits, s[i])
	}
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && isDigit(s[i]); i++ {
			digits = append(digits, s[i])
			fraction++
		}
	}
	var exp int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		expNeg := false
		if s[i] == '+' || s[i] == '-' {
			expNeg = s[i] == '-'
			i++
		}
		for i < len(s) && s[i] == '0' {
			i++
		}
		if len(s)-i > maxExponentDigits {
			return decimal{}, false
		}
		for ; i < len(s); i++ {
			exp = exp*10 + int64(s[i]-'0')
		}
		if expNeg {
			exp = -exp
		}
	}
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return decimal{}, true // zero, of either sign
	}
	exp -= fraction
	for digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	d.digits, d.exp = digits, exp
	return d, true
}

func (d decimal) equal(o decimal) bool {
	return d.neg == o.neg && d.exp == o.exp && bytes.Equal(d.digits, o.digits)
}

// appendTo writes d as digits and, unless it is zero, the power of ten:
// 1234e-2, 5e20, 17.
func (d decimal) appendTo(dst []byte) []byte {
	if len(d.digits) == 0 {
		return append(dst, '0')
	}
	if d.neg {
		dst = append(dst, '-')
	}
	dst = append(dst, d.digits...)
	if d.exp != 0 {
		dst = append(dst, 'e')
		dst = strconv.AppendInt(dst, d.exp, 10)
	}
	return dst
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// appendNumber appends the finite double f to dst as ECMAScript's
// Number.prototype.toString writes it (ECMA-262 Number::toString, which RFC
// 8785 section 3.2.2.3 adopts).
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		// Both +0 and -0.
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}

	// strconv's shortest form gives the digits s (k of them) and the exponent
	// of the first digit; ECMAScript calls n the position of the decimal point
	// relative to the first digit, so that f = s × 10^(n−k).
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±xx
	var digitBuf [24]byte
	digits := append(digitBuf[:0], b[0])
	i := 1
	if b[i] == '.' {
		for i++; b[i] != 'e'; i++ {
			digits = append(digits, b[i])
		}
	}
	i++ // 'e'
	expNeg := b[i] == '-'
	exp := 0
	for i++; i < len(b); i++ {
		exp = exp*10 + int(b[i]-'0')
	}
	if expNeg {
		exp = -exp
	}
	return appendDigits(dst, digits, exp+1)
}

// appendDigits appends, as ECMAScript's Number::toString writes it, the
// positive number whose shortest decimal digits are digits, with n of them
// before the decimal point: digits × 10^(n−len(digits)).
func appendDigits(dst, digits []byte, n int) []byte {
	k := len(digits)

	switch {
	case k <= n && n <= 21:
		// An integer: the digits followed by n−k zeros.
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		// A decimal point inside the digits.
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		// A small fraction: "0." and −n zeros before the digits.
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		// Exponent form: d[.ddd]e±x.
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 < 0 {
			dst = append(dst, '-')
		} else {
			dst = append(dst, '+')
		}
		e := n - 1
		if e < 0 {
			e = -e
		}
		dst = strconv.AppendInt(dst, int64(e), 10)
	}
	return dst
}

// appendShortDecimal appends the canonical form of text, a JSON number,
// without converting it to a double and back, when that cannot change its
// digits: text has no exponent, at most maxExactDigits significant digits
// (every such decimal is the shortest form of the double nearest to it,
// which a double's 53 bits can tell from every other), and a magnitude
// that is written without an exponent (1e-6 <= |v| < 1e21). Such a number
// is exact, and so is its own exact form. It reports false for any other
// number.
func appendShortDecimal(dst, text []byte) ([]byte, bool) {
	var buf [maxExactDigits]byte
	digits := buf[:0]
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	n := 0         // digits before the point, counted from the first significant one
	point := false // the point has been read
	zeros := 0     // zeros read since the last significant digit
	for _, c := range text {
		switch {
		case c == '.':
			point = true
		case c == 'e' || c == 'E':
			return nil, false
		case c == '0' && len(digits) == 0:
			if point {
				n-- // a leading zero after the point
			}
		case c == '0':
			zeros++
			if !point {
				n++
			}
		default:
			if len(digits)+zeros+1 > maxExactDigits {
				return nil, false
			}
			for ; zeros > 0; zeros-- {
				digits = append(digits, '0')
			}
			digits = append(digits, c)
			if !point {
				n++
			}
		}
	}
	if len(digits) == 0 {
		return append(dst, '0'), true // zero, of either sign
	}
	if n <= -6 || n > 21 {
		return nil, false
	}
	if neg {
		dst = append(dst, '-')
	}
	return appendDigits(dst, digits, n), true
}
