module github.com/idemkit/idem/idemredis/clientbench

go 1.25.0

require (
	github.com/redis/go-redis/v9 v9.22.0
	github.com/redis/rueidis v1.0.79
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
