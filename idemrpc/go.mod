module github.com/idemkit/idem/idemrpc

go 1.25.0

require (
	github.com/idemkit/idem v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800
	google.golang.org/protobuf v1.36.12
)

replace github.com/idemkit/idem => ../
