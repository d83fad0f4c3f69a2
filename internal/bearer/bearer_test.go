package bearer

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestFromHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fields []string
		token  string
		err    error
	}{
		{"Plain", []string{"Bearer sk_test_alice"}, "sk_test_alice", nil},
		{"LowercaseScheme", []string{"bearer sk_test_alice"}, "sk_test_alice", nil},
		{"UppercaseScheme", []string{"BEARER sk_test_alice"}, "sk_test_alice", nil},
		{"SeveralSpaces", []string{"Bearer   sk_test_alice"}, "sk_test_alice", nil},
		{"Padding", []string{"Bearer abc+/=="}, "abc+/==", nil},
		{"Missing", nil, "", ErrMissing},
		{"TwoFields", []string{"Bearer sk_test_alice", "Bearer sk_test_bob"}, "", ErrMultiple},
		{"TwoFieldsSameValue", []string{"Bearer sk_test_alice", "Bearer sk_test_alice"}, "", ErrMultiple},
		{"NoBreakSpaceBeforeToken", []string{"Bearer \u00a0sk_test_alice"}, "", ErrMalformed},
		{"NoBreakSpaceAfterToken", []string{"Bearer sk_test_alice\u00a0"}, "", ErrMalformed},
		{"TabSeparator", []string{"Bearer\tsk_test_alice"}, "", ErrScheme},
		{"Basic", []string{"Basic YWxpY2U6"}, "", ErrScheme},
		{"NoToken", []string{"Bearer "}, "", ErrMalformed},
		{"SchemeOnly", []string{"Bearer"}, "", ErrScheme},
		{"Comma", []string{"Bearer sk_a,sk_b"}, "", ErrMalformed},
		{"InnerSpace", []string{"Bearer sk a"}, "", ErrMalformed},
		{"Quote", []string{`Bearer "sk_a"`}, "", ErrMalformed},
		{"PaddingInside", []string{"Bearer ab=c"}, "", ErrMalformed},
		{"OnlyPadding", []string{"Bearer =="}, "", ErrMalformed},
		{"NUL", []string{"Bearer sk\x00a"}, "", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, f := range tt.fields {
				h.Add("Authorization", f)
			}
			token, err := FromHeader(h)
			if token != tt.token || !errors.Is(err, tt.err) {
				t.Errorf("FromHeader(%q) = %q, %v; want %q, %v", tt.fields, token, err, tt.token, tt.err)
			}
		})
	}
}

func TestTokensMatchWholeTokensOnly(t *testing.T) {
	t.Parallel()
	tokens, err := Parse("sk_test_alice=alice, sk_test_bob=bob")
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{"sk_test_alice": "alice", "sk_test_bob": "bob", "sk_test_alic": "", "sk_test_alice2": "", "": ""} {
		if got, ok := tokens.Client(token); got != want || ok != (want != "") {
			t.Errorf("Client(%q) = %q, %v; want %q", token, got, ok, want)
		}
	}
	if got := strings.Join(tokens.Clients(), ","); got != "alice,bob" {
		t.Errorf("Clients() = %s", got)
	}
}

// TestParseErrorsNeverHoldTheToken: a bad pair is named by position, so a
// secret given by mistake is not printed in the error.
func TestParseErrorsNeverHoldTheToken(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"sk_live_SECRETVALUE", "token pair 1 of 1"},
		{"sk_a=alice,sk_live_SECRETVALUE", "token pair 2 of 2"},
		{"sk_live_SECRET VALUE=alice", "token pair 1 of 1"},
		{"sk_live_SECRETVALUE=alice,sk_live_SECRETVALUE=bob", "token pair 2 of 2"},
		{"=alice", "token pair 1 of 1"},
	} {
		_, err := Parse(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("Parse(%q) = %v, want an error naming %q without the token", tt.in, err, tt.want)
		}
	}
	if _, err := New(map[string]string{"sk live SECRET": "alice"}); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("New with a bad token = %v, want an error without the token", err)
	}
}
