package keyspec

import (
	"crypto/sha256"
	"encoding/hex"
)

// Digest is the short digest of a key that idem writes to logs in place
// of the key (key_digest): operators find a key's log lines by it, and
// `idem keys` prints it.
func Digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}
