package keyspec

import (
	"fmt"
	"strings"
)

// MaxLength is the longest key, in characters (Stripe's limit). The length
// of a quoted key is counted after unescaping.
const MaxLength = 255

// Kind says what is wrong with a key.
type Kind int

const (
	// Empty is a field, or sf-string, without a key.
	Empty Kind = iota + 1
	// TooLong is a key longer than MaxLength.
	TooLong
	// Malformed is a field that is neither an sf-string nor a bare key.
	Malformed
)

// Error describes why a key is not valid.
type Error struct {
	Kind   Kind
	Reason string // a short explanation that never echoes the key
}

func (e *Error) Error() string { return e.Reason }

// IsStringChar reports whether c may appear in a key: printable ASCII.
// Inside an sf-string, '"' and '\' are escaped with a backslash.
func IsStringChar(c byte) bool { return 0x20 <= c && c <= 0x7e }

// IsBareChar reports whether c may appear in a key sent bare, without
// quotes: a letter, a digit or one of "_-.:~/+=".
func IsBareChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '_', '-', '.', ':', '~', '/', '+', '=':
		return true
	}
	return false
}

// Check reports whether key is a valid key: 1 to MaxLength printable ASCII
// characters. Every valid key can be sent as an sf-string ([Quote]).
func Check(key string) error {
	if key == "" {
		return &Error{Kind: Empty, Reason: "the key is empty"}
	}
	if len(key) > MaxLength {
		return tooLong(len(key))
	}
	for i := 0; i < len(key); i++ {
		if !IsStringChar(key[i]) {
			return notPrintable(key[i], i)
		}
	}
	return nil
}

// CheckBare reports whether key is a valid key that can be sent bare: 1 to
// MaxLength characters for which [IsBareChar] holds.
func CheckBare(key string) error {
	if err := Check(key); err != nil {
		return err
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; !IsBareChar(c) {
			return malformed(fmt.Sprintf("character %q at position %d is not allowed in an unquoted key; quote the key as an sf-string", c, i))
		}
	}
	return nil
}

// Quote returns key as an RFC 9651 sf-string: in double quotes, with '"'
// and '\' escaped. key must pass [Check].
func Quote(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}

// Format returns the field value that carries key: the key itself when bare
// is set, else the sf-string of [Quote]. A key that cannot be sent in the
// asked form is an error; Format never changes the form on its own.
func Format(key string, bare bool) (string, error) {
	if bare {
		if err := CheckBare(key); err != nil {
			return "", err
		}
		return key, nil
	}
	if err := Check(key); err != nil {
		return "", err
	}
	return Quote(key), nil
}

// Parse parses the value of one Idempotency-Key field and returns the key.
// Spaces and tabs around the value are ignored. The value is an sf-string,
// optionally followed by parameters (";name=value"), which are parsed and
// ignored, or a bare key. The error is an *Error.
func Parse(field string) (string, error) {
	s := trimSP(field)
	if s == "" {
		return "", &Error{Kind: Empty, Reason: "the Idempotency-Key field is empty"}
	}
	if s[0] != '"' {
		return parseBare(s)
	}
	key, rest, err := parseSFString(s, MaxLength)
	if err != nil {
		return "", err
	}
	if err := parseSFParams(rest); err != nil {
		return "", err
	}
	if key == "" {
		return "", &Error{Kind: Empty, Reason: "the Idempotency-Key string is empty"}
	}
	return key, nil
}

func tooLong(n int) error {
	return &Error{Kind: TooLong, Reason: fmt.Sprintf("the key has %d characters; the limit is %d", n, MaxLength)}
}

func malformed(reason string) error {
	return &Error{Kind: Malformed, Reason: reason}
}

func notPrintable(c byte, i int) error {
	return malformed(fmt.Sprintf("byte 0x%02x at position %d is not printable ASCII", c, i))
}

func trimSP(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func parseBare(s string) (string, error) {
	if !allBare(s) {
		for i := 0; i < len(s); i++ {
			if c := s[i]; notBare[c] != 0 {
				if !IsStringChar(c) {
					return "", notPrintable(c, i)
				}
				return "", malformed(fmt.Sprintf("character %q at position %d is not allowed in an unquoted key; quote the key as an sf-string", c, i))
			}
		}
	}
	if len(s) > MaxLength {
		return "", tooLong(len(s))
	}
	return s, nil
}

// allBare reports whether IsBareChar holds for every byte of s. It looks
// at sixteen bytes a step, then eight, with one test a step instead of one
// a byte: keys are mostly valid, and are read to their end. A step first
// tests its bytes as words (see commonWords), which settles most keys'
// words without a look at the table; a step that test does not settle
// ORs its bytes' marks from the table.
func allBare(s string) bool {
	var bad byte
	for len(s) >= 16 {
		// Two words a step share the constants that commonWords loads.
		if !commonWords(word(s), word(s[8:])) {
			bad |= notBare[s[0]] | notBare[s[1]] | notBare[s[2]] | notBare[s[3]] |
				notBare[s[4]] | notBare[s[5]] | notBare[s[6]] | notBare[s[7]] |
				notBare[s[8]] | notBare[s[9]] | notBare[s[10]] | notBare[s[11]] |
				notBare[s[12]] | notBare[s[13]] | notBare[s[14]] | notBare[s[15]]
		}
		s = s[16:]
	}
	for len(s) >= 8 {
		if !commonWords(word(s), word(s)) { // the word twice: one word's test
			bad |= notBare[s[0]] | notBare[s[1]] | notBare[s[2]] | notBare[s[3]] |
				notBare[s[4]] | notBare[s[5]] | notBare[s[6]] | notBare[s[7]]
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		bad |= notBare[s[i]]
	}
	return bad == 0
}

const (
	// lowBits has the low bit of every byte of a word set.
	lowBits = 0x0101010101010101
	// highBits has the high bit of every byte of a word set.
	highBits = 0x8080808080808080
)

// word returns the first eight bytes of s, which has them, as a
// little-endian word. The compiler makes the eight loads one.
func word(s string) uint64 {
	s = s[:8] // one bounds check, and the loads below need none
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// commonWords reports whether every byte of x and y is a letter, a digit,
// or one of '-', '.', '/' and ':', the bytes of most keys: all of them bare
// (IsBareChar). It reports false for words with any other byte, bare or
// not, which the table must then decide. TestCommonWords compares it with
// IsBareChar.
//
// Each byte is tested on its own: once no byte has its high bit set, the
// additions below stay within each byte (a byte below 0x80 plus at most
// 0x80 is below 0x100), so no carry crosses into the next byte. A byte's
// high bit in x+(0x80-lo) is set when the byte is lo or more, and in
// x+(0x7f-hi) when it is more than hi. The bytes from '-' (0x2d) to ':'
// (0x3a) are '-', '.', '/', the digits and ':'. A letter with bit 0x20
// set is its lower case, and only letters fall in 'a'..'z' so.
func commonWords(x, y uint64) bool {
	if (x|y)&highBits != 0 {
		return false
	}
	const lo, hi = (0x80 - '-') * lowBits, (0x7f - ':') * lowBits
	const foldLo, foldHi = (0x80 - 'a') * lowBits, (0x7f - 'z') * lowBits
	fx, fy := x|0x20*lowBits, y|0x20*lowBits
	cx := (x+lo)&^(x+hi) | (fx+foldLo)&^(fx+foldHi) // punctuation and digits, letters
	cy := (y+lo)&^(y+hi) | (fy+foldLo)&^(fy+foldHi)
	return cx&cy&highBits == highBits
}

// notBare marks, with 1, the bytes for which IsBareChar does not hold, as
// a table for allBare's loop over every byte of a key.
var notBare = func() (t [256]byte) {
	for c := range 256 {
		if !IsBareChar(byte(c)) {
			t[c] = 1
		}
	}
	return t
}()

// parseSFString parses an RFC 9651 sf-string at the start of s and returns
// its value and the rest of s. A value longer than limit is an error.
func parseSFString(s string, limit int) (string, string, error) {
	// Most keys have no escapes: their value is the text between the
	// quotes, and needs no copy.
	for i := 1; i < len(s) && i <= limit+1; i++ {
		if c := s[i]; c == '"' {
			return s[1:i], s[i+1:], nil
		} else if c == '\\' || !IsStringChar(c) {
			break
		}
	}
	buf := make([]byte, 0, min(len(s), limit+1))
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) {
				return "", "", malformed("the key ends inside an escape sequence")
			}
			if s[i] != '"' && s[i] != '\\' {
				return "", "", malformed(fmt.Sprintf("invalid escape \\%c in the key string", s[i]))
			}
			buf = append(buf, s[i])
		case c == '"':
			return string(buf), s[i+1:], nil
		case !IsStringChar(c):
			return "", "", notPrintable(c, i)
		default:
			buf = append(buf, c)
		}
		if len(buf) > limit {
			return "", "", tooLong(len(buf))
		}
	}
	return "", "", malformed("the key string has no closing quote")
}

// parseSFParams parses the parameters of an sf-item (";key=value" ...) and
// discards them. Anything else after the string is an error.
func parseSFParams(s string) error {
	for len(s) > 0 {
		if s[0] != ';' {
			return malformed("unexpected characters after the key string; send exactly one quoted string")
		}
		s = trimLeadingSP(s[1:])
		n := 0
		for n < len(s) && isParamKeyChar(s[n], n == 0) {
			n++
		}
		if n == 0 {
			return malformed("a parameter after the key has no valid name")
		}
		s = s[n:]
		if len(s) == 0 || s[0] != '=' {
			continue // a parameter without a value is the boolean true
		}
		rest, err := skipBareItem(s[1:])
		if err != nil {
			return err
		}
		s = rest
	}
	return nil
}

func trimLeadingSP(s string) string {
	for len(s) > 0 && s[0] == ' ' {
		s = s[1:]
	}
	return s
}

func isParamKeyChar(c byte, first bool) bool {
	if 'a' <= c && c <= 'z' || c == '*' {
		return true
	}
	return !first && ('0' <= c && c <= '9' || c == '_' || c == '-' || c == '.')
}

// skipBareItem skips one RFC 9651 bare item: a string, token, number,
// boolean, byte sequence, date or display string.
func skipBareItem(s string) (string, error) {
	if s == "" {
		return "", malformed("a parameter after the key has an empty value")
	}
	switch c := s[0]; {
	case c == '"':
		_, rest, err := parseSFString(s, len(s))
		return rest, err
	case c == '%': // display string: %"..." with %xx escapes
		if len(s) < 2 || s[1] != '"' {
			return "", malformed("invalid display string parameter")
		}
		for i := 2; i < len(s); i++ {
			switch {
			case s[i] == '"':
				return s[i+1:], nil
			case !IsStringChar(s[i]):
				return "", malformed("invalid display string parameter")
			}
		}
		return "", malformed("unterminated display string parameter")
	case c == '@': // date: @ and an integer
		rest, err := skipBareItem(s[1:])
		if err != nil || len(s) < 2 || (s[1] != '-' && (s[1] < '0' || s[1] > '9')) {
			return "", malformed("invalid date parameter")
		}
		return rest, nil
	case c == '?':
		if len(s) < 2 || (s[1] != '0' && s[1] != '1') {
			return "", malformed("a boolean parameter must be ?0 or ?1")
		}
		return s[2:], nil
	case c == ':':
		for i := 1; i < len(s); i++ {
			if s[i] == ':' {
				return s[i+1:], nil
			}
			if !isBase64Char(s[i]) {
				return "", malformed("invalid byte sequence parameter")
			}
		}
		return "", malformed("unterminated byte sequence parameter")
	case c == '-' || '0' <= c && c <= '9':
		i := 1
		for i < len(s) && ('0' <= s[i] && s[i] <= '9' || s[i] == '.') {
			i++
		}
		return s[i:], nil
	case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '*':
		i := 1
		for i < len(s) && isTokenChar(s[i]) {
			i++
		}
		return s[i:], nil
	default:
		return "", malformed("invalid parameter value after the key")
	}
}

func isBase64Char(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

// isTokenChar reports whether c is a tchar, ":" or "/" (RFC 9651 sf-token).
func isTokenChar(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}
