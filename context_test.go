package idem_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

func TestScopeFromContext(t *testing.T) {
	t.Parallel()

	type otherKey struct{}
	outer := idemstore.Scope{ClientID: "acct_1", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"}
	inner := idemstore.Scope{ClientID: "acct_2", Key: "key-2"}
	tests := []struct {
		name   string
		ctx    context.Context
		want   idemstore.Scope
		wantOK bool
	}{
		{"Background", context.Background(), idemstore.Scope{}, false},
		{"OtherValue", context.WithValue(context.Background(), otherKey{}, outer), idemstore.Scope{}, false},
		{"WithScope", idem.ContextWithScope(context.Background(), outer), outer, true},
		{"WithEmptyScope", idem.ContextWithScope(context.Background(), idemstore.Scope{}), idemstore.Scope{}, true},
		{"InnerScopeWins", idem.ContextWithScope(idem.ContextWithScope(context.Background(), outer), inner), inner, true},
		{"SurvivesDerivedContexts", context.WithValue(idem.ContextWithScope(context.Background(), outer), otherKey{}, "x"), outer, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := idem.ScopeFromContext(tt.ctx)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ScopeFromContext = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestDeriveKey(t *testing.T) {
	t.Parallel()

	base := idemstore.Scope{ClientID: "acct_1MqDcVKa5ka2AbCd", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"}
	derive := func(s idemstore.Scope, purpose string) string {
		return idem.DeriveKey(idem.ContextWithScope(context.Background(), s), purpose)
	}

	t.Run("EmptyWithoutScope", func(t *testing.T) {
		t.Parallel()
		if got := idem.DeriveKey(context.Background(), "charge"); got != "" {
			t.Errorf("DeriveKey without a scope = %q, want \"\"", got)
		}
	})

	t.Run("Stable", func(t *testing.T) {
		t.Parallel()
		first := derive(base, "charge")
		copied := idemstore.Scope{ClientID: strings.Clone(base.ClientID), Key: strings.Clone(base.Key)}
		for i := 0; i < 3; i++ {
			if got := derive(copied, "charge"); got != first {
				t.Fatalf("DeriveKey call %d = %q, want %q", i, got, first)
			}
		}
		ctx, cancel := context.WithCancel(idem.ContextWithScope(context.Background(), base))
		cancel()
		if got := idem.DeriveKey(ctx, "charge"); got != first {
			t.Errorf("DeriveKey with a cancelled context = %q, want %q", got, first)
		}
	})

	t.Run("SameInEveryProcess", func(t *testing.T) {
		t.Parallel()
		// The key is a digest of its inputs alone, so another process, or a
		// later release, derives the same key for a retried request.
		h := sha256.New()
		for _, part := range []string{"idem-derive-v1", base.ClientID, base.Key, "charge"} {
			h.Write(binary.AppendUvarint(nil, uint64(len(part))))
			io.WriteString(h, part)
		}
		want := "idk_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:24])
		if got := derive(base, "charge"); got != want {
			t.Errorf("DeriveKey = %q, want %q", got, want)
		}
	})

	differs := []struct {
		name     string
		scope    idemstore.Scope
		purpose  string
		other    idemstore.Scope
		otherPur string
	}{
		{"ByPurpose", base, "charge", base, "refund"},
		{"ByEmptyPurpose", base, "", base, "charge"},
		{"ByPurposeCase", base, "charge", base, "Charge"},
		{"ByClient", base, "charge", idemstore.Scope{ClientID: "acct_2", Key: base.Key}, "charge"},
		{"ByKey", base, "charge", idemstore.Scope{ClientID: base.ClientID, Key: "8e03978e-40d5-43e8-bc93-6894a57f9325"}, "charge"},
		{"ByClientAndKeyBoundary", idemstore.Scope{ClientID: "ab", Key: "c"}, "charge", idemstore.Scope{ClientID: "a", Key: "bc"}, "charge"},
		{"ByKeyAndPurposeBoundary", idemstore.Scope{ClientID: "a", Key: "bc"}, "d", idemstore.Scope{ClientID: "a", Key: "b"}, "cd"},
		{"ByEmptyScope", idemstore.Scope{}, "charge", base, "charge"},
	}
	for _, tt := range differs {
		t.Run("Differs"+tt.name, func(t *testing.T) {
			t.Parallel()
			a, b := derive(tt.scope, tt.purpose), derive(tt.other, tt.otherPur)
			if a == b {
				t.Errorf("DeriveKey(%+v, %q) = DeriveKey(%+v, %q) = %q", tt.scope, tt.purpose, tt.other, tt.otherPur, a)
			}
		})
	}

	shape := []struct {
		name    string
		scope   idemstore.Scope
		purpose string
	}{
		{"UUIDKey", base, "charge"},
		{"LongKey", idemstore.Scope{ClientID: "acct_1", Key: strings.Repeat("k", idem.MaxKeyLength)}, "refund"},
		{"KeyWithSpecialCharacters", idemstore.Scope{ClientID: "acct_1", Key: `order "42"; retry \ 1`}, "charge"},
		{"EmptyScope", idemstore.Scope{}, ""},
	}
	for _, tt := range shape {
		t.Run("Shape"+tt.name, func(t *testing.T) {
			t.Parallel()
			got := derive(tt.scope, tt.purpose)
			if !strings.HasPrefix(got, "idk_") || len(got) != len("idk_")+32 {
				t.Errorf("DeriveKey = %q, want idk_ and 32 characters", got)
			}
			if tt.scope.Key != "" && strings.Contains(got, tt.scope.Key) {
				t.Errorf("DeriveKey = %q, which contains the key %q", got, tt.scope.Key)
			}
			if tt.scope.ClientID != "" && strings.Contains(got, tt.scope.ClientID) {
				t.Errorf("DeriveKey = %q, which contains the client %q", got, tt.scope.ClientID)
			}
			// The derived key is sent downstream as an Idempotency-Key, so
			// it must be a valid key in both of the forms ParseKey accepts.
			for _, field := range []string{got, `"` + got + `"`} {
				if key, err := idem.ParseKey(field); err != nil || key != got {
					t.Errorf("ParseKey(%q) = %q, %v; want %q", field, key, err, got)
				}
			}
		})
	}
}
