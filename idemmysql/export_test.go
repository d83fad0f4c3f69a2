package idemmysql

// RoundTrips returns the number of statements the store's connections
// have sent: with interpolated parameters, one round trip each.
func RoundTrips(s *Store) int64 { return s.conn.roundTrips.Load() }
