package database

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/idemredis"
)

// The store's own settings, taken out of a Redis URL's query before
// go-redis reads the rest.
const (
	redisMinReplicas    = "min_replicas"    // idemredis.Config.MinReplicas
	redisReplicaTimeout = "replica_timeout" // idemredis.Config.ReplicaTimeout, a Go duration
	redisPrefix         = "prefix"          // idemredis.Config.Prefix
)

// openRedis opens an idemredis store on redis://[user:password@]host:port/N
// or redis-cluster://[user:password@]host:port,host:port,... (seed
// addresses of a cluster), each with the query options min_replicas,
// replica_timeout and prefix.
func openRedis(ctx context.Context, raw string, c Config) (*DB, error) {
	cluster := strings.HasPrefix(raw, "redis-cluster://")
	u, err := url.Parse(strings.Replace(raw, "redis-cluster://", "redis://", 1))
	if err != nil {
		return nil, errors.New("database: parse Redis URL: malformed") // the URL may hold a password
	}
	var sc idemredis.Config
	q := u.Query()
	if v := q.Get(redisMinReplicas); v != "" {
		if sc.MinReplicas, err = strconv.Atoi(v); err != nil {
			return nil, fmt.Errorf("database: Redis URL: %s=%q: want a number", redisMinReplicas, v)
		}
	}
	if v := q.Get(redisReplicaTimeout); v != "" {
		if sc.ReplicaTimeout, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("database: Redis URL: %s=%q: want a duration such as 500ms", redisReplicaTimeout, v)
		}
	}
	sc.Prefix = q.Get(redisPrefix)
	q.Del(redisMinReplicas)
	q.Del(redisReplicaTimeout)
	q.Del(redisPrefix)
	u.RawQuery = q.Encode()

	var rdb redis.UniversalClient
	var name string
	if cluster {
		if u.Path != "" && u.Path != "/" {
			return nil, errors.New("database: a redis-cluster:// URL names no database number: a cluster has only database 0")
		}
		opts := &redis.ClusterOptions{Addrs: strings.Split(u.Host, ",")}
		if u.User != nil {
			opts.Username = u.User.Username()
			opts.Password, _ = u.User.Password()
		}
		rdb = redis.NewClusterClient(opts)
		name = "redis-cluster://" + u.Host
	} else {
		opts, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, errors.New("database: parse Redis URL: want redis://[user:password@]host:port/N")
		}
		rdb = redis.NewClient(opts)
		name = fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB)
	}
	store, err := idemredis.New(rdb, &sc)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("database: connect to %s: %w", name, err)
	}
	return &DB{Name: name, Redis: store, RedisClient: rdb}, nil
}
