// Package reqlog carries, in a request's context, what its log line says
// beyond the request itself: package idemlog puts an Info there and writes
// the line, and the idem middleware and key-status handler, which must not
// import idemlog, fill it in through this package.
package reqlog

import (
	"context"
	"sync"
)

type infoKey struct{}

// Info is what the request's log line says beyond the request itself,
// filled in by the handlers it passes through.
type Info struct {
	ID string // the request's id

	mu        sync.Mutex
	client    string
	keyDigest string
	result    string
}

// NewContext returns a context that carries info.
func NewContext(ctx context.Context, info *Info) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// FromContext returns the Info of the request whose context this is.
func FromContext(ctx context.Context) (*Info, bool) {
	info, ok := ctx.Value(infoKey{}).(*Info)
	return info, ok
}

// SetClient names the request's client.
func (i *Info) SetClient(client string) {
	i.mu.Lock()
	i.client = client
	i.mu.Unlock()
}

// SetScope names the request's client and, unless keyDigest is empty, the
// digest of its key.
func (i *Info) SetScope(client, keyDigest string) {
	i.mu.Lock()
	i.client = client
	if keyDigest != "" {
		i.keyDigest = keyDigest
	}
	i.mu.Unlock()
}

// SetResult records the request's final result.
func (i *Info) SetResult(result string) {
	i.mu.Lock()
	i.result = result
	i.mu.Unlock()
}

// Notes returns the client, the key's digest and the result, each empty
// when nothing set it.
func (i *Info) Notes() (client, keyDigest, result string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.client, i.keyDigest, i.result
}
