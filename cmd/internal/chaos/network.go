package chaos

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Link is a connection between two processes of a run that the network
// faults act on: every instance reaches the database, processord and the
// webhook receiver through a link of its own.
type Link int

const (
	// LinkDatabase is an instance's connections to PostgreSQL (instance
	// 0's pass the commit-cutting proxy first).
	LinkDatabase Link = iota
	// LinkProcessor is an instance's charges to processord.
	LinkProcessor
	// LinkWebhook is an instance's outbox relay delivering to the
	// receiver.
	LinkWebhook
	// LinkUpstream is an idemproxy instance's forwards to its upstream
	// (the instance is the proxy's index).
	LinkUpstream
	links
	// LinkBroker is an instance's connection to the run's broker, when it
	// has one. Its faults fall on a schedule of their own
	// (harness.faultBrokerLinks): it is not among the links the fault
	// schedule draws, so that a seed's schedule is the same with and
	// without a queue.
	LinkBroker = links
)

func (l Link) String() string {
	return [...]string{"database", "processor", "webhook", "upstream", "broker"}[l]
}

// Toxic is what a network fault does to a link, for its hold time.
type Toxic int

const (
	// ToxicLatency delays every answer on the link by more than the
	// timeouts of the side that waits for it.
	ToxicLatency Toxic = iota
	// ToxicReset resets the link's connections as data crosses them
	// (TCP RST mid-stream).
	ToxicReset
	// ToxicBlackhole lets the link's connections open but drops every
	// answer: a peer that accepts and never answers.
	ToxicBlackhole
	toxics
)

func (t Toxic) String() string { return [...]string{"latency", "reset", "blackhole"}[t] }

// network is the run's toxiproxy (github.com/Shopify/toxiproxy/v2, in
// process): one proxy per link and instance, toxics added and removed on
// the fault schedule. The commit cuts stay with pgproxy, which alone
// understands PostgreSQL's protocol. The primary's link is a switch of
// its own (primarySwitch), which a failover moves.
type network struct {
	srv     *toxiproxy.ApiServer
	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy // by linkName
	primary *primarySwitch              // nil until routePrimary
}

func newNetwork() *network {
	logger := zerolog.Nop()
	return &network{
		srv:     toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger),
		proxies: map[string]*toxiproxy.Proxy{},
	}
}

func linkName(l Link, instance int) string { return fmt.Sprintf("%s-%d", l, instance) }

// routePrimary starts the primary's link in front of rawURL's server and
// returns rawURL through it. Every database link and the harness's own
// connections pass it, and a failover moves it to the promoted standby.
// No toxic goes on it.
func (n *network) routePrimary(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("chaos: route the primary: %w", err)
	}
	s, err := newPrimarySwitch(u.Host)
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	n.primary = s
	n.mu.Unlock()
	u.Host = s.addr()
	return u.String(), nil
}

// routeReplication starts the link by which the n-th standby streams from
// the primary at upstream, and returns its address. With lag, every
// answer on it, the WAL stream included, arrives lag late: a standby on
// another machine. Its proxy is never moved: the next standby gets a link
// of its own to the new primary.
func (n *network) routeReplication(i int, upstream string, lag time.Duration) (string, error) {
	name := fmt.Sprintf("replication-%d", i)
	n.mu.Lock()
	p := n.proxies[name]
	n.mu.Unlock()
	if p != nil && p.Upstream == upstream {
		return p.Listen, nil // a standby that failed to start is made again
	}
	p = toxiproxy.NewProxy(n.srv, name, "127.0.0.1:0", upstream)
	if err := n.srv.Collection.Add(p, true); err != nil {
		return "", fmt.Errorf("chaos: start the %s link: %w", name, err)
	}
	if lag > 0 {
		spec := fmt.Sprintf(`{"name":"lag","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d,"jitter":0}}`, lag.Milliseconds())
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			return "", fmt.Errorf("chaos: delay the %s link: %w", name, err)
		}
	}
	n.mu.Lock()
	n.proxies[name] = p
	n.mu.Unlock()
	return p.Listen, nil
}

// partition drops everything the primary sends on the n-th replication
// link for hold, then heals it: a standby cut off from its primary.
func (n *network) partition(i int, hold time.Duration) error {
	n.mu.Lock()
	p := n.proxies[fmt.Sprintf("replication-%d", i)]
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	spec := `{"name":"partition","type":"timeout","stream":"downstream","toxicity":1,"attributes":{"timeout":0}}`
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		return fmt.Errorf("chaos: partition the standby: %w", err)
	}
	time.Sleep(hold)
	return p.Toxics.RemoveToxic(context.Background(), "partition")
}

// viaPrimary returns rawURL, a URL of the primary's server, with its
// host:port replaced by the primary's link, which must exist.
func (n *network) viaPrimary(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("chaos: route via the primary's link: %w", err)
	}
	n.mu.Lock()
	u.Host = n.primary.addr()
	n.mu.Unlock()
	return u.String(), nil
}

// movePrimary points the primary's link at upstream, a host:port,
// closing every connection to the old one.
func (n *network) movePrimary(upstream string) {
	n.mu.Lock()
	s := n.primary
	n.mu.Unlock()
	s.move(upstream)
}

// primaryTarget is the host:port the primary's link forwards to.
func (n *network) primaryTarget() string {
	n.mu.Lock()
	s := n.primary
	n.mu.Unlock()
	return s.target()
}

// route starts the proxy of a link to upstream, a host:port, and returns
// the address to dial instead.
func (n *network) route(l Link, instance int, upstream string) (string, error) {
	name := linkName(l, instance)
	p := toxiproxy.NewProxy(n.srv, name, "127.0.0.1:0", upstream)
	if err := n.srv.Collection.Add(p, true); err != nil {
		return "", fmt.Errorf("chaos: start the %s link of instance %d: %w", l, instance, err)
	}
	n.mu.Lock()
	n.proxies[name] = p
	n.mu.Unlock()
	return p.Listen, nil
}

// routeURL is route for a URL: it returns u with its host:port replaced by
// the link's address.
func (n *network) routeURL(l Link, instance int, rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("chaos: route %s: %w", l, err)
	}
	addr, err := n.route(l, instance, u.Host)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}

// has reports whether the link of instance exists (no database link on
// SQLite).
func (n *network) has(l Link, instance int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.proxies[linkName(l, instance)]
	return ok
}

// inject puts a toxic on a link for hold, then takes it off, whatever
// happened meanwhile: a run never ends with a faulty link.
func (n *network) inject(l Link, instance int, t Toxic, hold time.Duration) error {
	n.mu.Lock()
	p := n.proxies[linkName(l, instance)]
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	var spec string
	switch t {
	case ToxicLatency:
		spec = `{"name":"fault","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d,"jitter":0}}`
		spec = fmt.Sprintf(spec, linkLatency.Milliseconds())
	case ToxicReset:
		spec = `{"name":"fault","type":"reset_peer","stream":"upstream","toxicity":1,"attributes":{"timeout":0}}`
	case ToxicBlackhole:
		spec = `{"name":"fault","type":"timeout","stream":"downstream","toxicity":1,"attributes":{"timeout":0}}`
	}
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		return fmt.Errorf("chaos: put %s on the %s link of instance %d: %w", t, l, instance, err)
	}
	time.Sleep(hold)
	if err := p.Toxics.RemoveToxic(context.Background(), "fault"); err != nil {
		return fmt.Errorf("chaos: take %s off the %s link of instance %d: %w", t, l, instance, err)
	}
	return nil
}

// close stops every proxy.
func (n *network) close() {
	n.srv.Collection.Clear()
	if n.primary != nil {
		n.primary.close()
	}
}

// linkLatency is what a latency fault adds to each answer on a link: past
// paymentsd's store and processor timeouts and a client's attempt.
const linkLatency = attemptTimeout + time.Second
