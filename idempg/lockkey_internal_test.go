package idempg

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemstore"
)

// lockKeyStreamed is lockKey as it was first written, the digest fed piece
// by piece: instances of different versions must take the same lock for a
// scope.
func lockKeyStreamed(scope idemstore.Scope) int64 {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write([]byte("idem-lock-v1"))
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(scope.ClientID)))])
	h.Write([]byte(scope.ClientID))
	h.Write([]byte(scope.Key))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// TestLockKeyUnchanged checks that the lock of a scope is the one earlier
// versions take, for scopes that fit lockKey's stack buffer and for longer
// ones, and pins one value.
func TestLockKeyUnchanged(t *testing.T) {
	scopes := []idemstore.Scope{
		{},
		{ClientID: "alice", Key: "0f8fad5b-d9cb-469f-a165-70867728950e"},
		{ClientID: "ab", Key: "c"},
		{ClientID: "a", Key: "bc"},
		{ClientID: "clé", Key: "ключ"},
		{ClientID: strings.Repeat("c", 100), Key: strings.Repeat("k", 100)},
		{ClientID: "bob", Key: strings.Repeat("k", 255)},
	}
	seen := map[int64]idemstore.Scope{}
	for _, s := range scopes {
		got, want := lockKey(s), lockKeyStreamed(s)
		if got != want {
			t.Errorf("lockKey(%q, %q) = %d, want %d", s.ClientID, s.Key, got, want)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("lockKey(%q, %q) = lockKey(%q, %q)", s.ClientID, s.Key, other.ClientID, other.Key)
		}
		seen[got] = s
	}
	const pinned = -4899734466335939703
	if got := lockKey(idemstore.Scope{ClientID: "alice", Key: "k1"}); got != pinned {
		t.Errorf("lockKey(alice, k1) = %d, want %d", got, int64(pinned))
	}
}

// TestLockKeyAllocatesNothing: a claim's lock key costs no allocation for
// a scope of the usual size.
func TestLockKeyAllocatesNothing(t *testing.T) {
	scope := idemstore.Scope{ClientID: "cli_0123456789", Key: "0f8fad5b-d9cb-469f-a165-70867728950e"}
	if n := testing.AllocsPerRun(100, func() { lockKey(scope) }); n != 0 {
		t.Errorf("lockKey allocates %v times per call, want 0", n)
	}
}
