package clientbench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// claimShaped has the shape of idemredis's claim script: it reads seven
// fields of the key's hash and, for a new key, writes fourteen and sets
// its expiry, returning three values. Every run claims a new key.
const claimShaped = `
local cur = redis.call('HMGET', KEYS[1], 'st', 'ca', 'la', 'tok', 'rh', 'n', 'tk')
if not cur[1] then
	redis.call('HSET', KEYS[1], 'c', ARGV[1], 'k', ARGV[2], 'm', 'POST', 'p', '/v1/charges', 'rh', ARGV[3], 'rf', '',
		'st', 'started', 'ca', ARGV[4], 'la', ARGV[4], 'tok', '1', 'n', ARGV[5], 'tk', '0')
	redis.call('PEXPIRE', KEYS[1], 86400000)
	return {'new', '1', ARGV[4]}
end
return {'exists', redis.call('HMGET', KEYS[1], 'c', 'k', 'm', 'p', 'rh', 'rf', 'st', 'ca', 'la', 'le', 'tok')}
`

// startServer starts a redis-server without persistence on a free
// loopback port, killed when the benchmark ends.
func startServer(b *testing.B) string {
	b.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skipf("redis-server not found: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := b.TempDir()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return addr
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("redis-server did not answer in 30 s")
		}
		time.Sleep(20 * time.Millisecond) // a poll's pause
	}
}

// BenchmarkClaimScript runs the claim-shaped script on a new key per
// call, through go-redis (a pool, one command per connection at a time)
// and rueidis (one connection, commands of concurrent callers pipelined
// on it), from one goroutine ("serial") and from 64 per CPU ("parallel").
func BenchmarkClaimScript(b *testing.B) {
	addr := startServer(b)
	ctx := context.Background()
	var seq atomic.Int64
	args := func() []string {
		n := strconv.FormatInt(seq.Add(1), 10)
		return []string{"{b:alice:k" + n + "}", "alice", "k" + n, "0123456789abcdef0123456789abcdef", "1764000000000000", "nonce" + n}
	}

	gr := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 256})
	b.Cleanup(func() { gr.Close() })
	grScript := redis.NewScript(claimShaped)
	goRedis := func() error {
		a := args()
		_, err := grScript.Run(ctx, gr, a[:1], a[1], a[2], a[3], a[4], a[5]).Result()
		return err
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.Close)
	ruScript := rueidis.NewLuaScript(claimShaped)
	rueid := func() error {
		a := args()
		return ruScript.Exec(ctx, rc, a[:1], a[1:]).Error()
	}
	for _, c := range []struct {
		name string
		run  func() error
	}{{"go-redis", goRedis}, {"rueidis", rueid}} {
		if err := c.run(); err != nil { // loads the script
			b.Fatalf("%s: %v", c.name, err)
		}
		b.Run(c.name+"/serial", func(b *testing.B) {
			for range b.N {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.SetParallelism(64)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.run(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
