package idem

// KeyDigest is the short digest of a key that idem writes to logs in place
// of the key: operators find a key's log lines by it.
func KeyDigest(key string) string { return keyDigest(key) }
