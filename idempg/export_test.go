package idempg

// QuerySessionClaim is the atomic claim statement at READ COMMITTED.
const QuerySessionClaim = querySessionClaim

// SetSessionClaimQuery makes s send query instead of QuerySessionClaim.
func SetSessionClaimQuery(s *Store, query string) { s.testHooks.sessionClaimQuery = query }

// SessionLockCall is QuerySessionClaim's call of idem_session_lock, which
// takes the key's lock and reads the key again.
const SessionLockCall = sessionLockCall

// SendPlainArgs makes s send plain values as the arguments of the
// statements that arg.go's types serve, as it does in the query modes
// where pgx does not learn the parameters' types from the server.
func SendPlainArgs(s *Store) { s.typedArgs = false }
