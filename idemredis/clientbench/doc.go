// Package clientbench measures the round trip of a claim-shaped Lua
// script through go-redis (which idemredis uses) and through rueidis, on a
// redis-server of the benchmark's own. It is a module of its own, outside
// the workspace, so that rueidis never enters idemredis's go.mod; run it
// with
//
//	cd idemredis/clientbench && go test -run '^$' -bench . -benchtime 3s
//
// idemredis's doc.go gives the figures and what follows from them.
package clientbench
