package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startTimeout bounds Start: formatting and starting the brokers.
const startTimeout = 3 * time.Minute

// Start starts a cluster for t and closes it in t.Cleanup (printing the
// brokers' log tails first when t failed). opts.Name defaults to the test
// name. Without java or the cached jars it skips t, naming what is missing
// and `make kafka`; with REPSTREAM_REQUIRE_KAFKA set it fails t instead.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	Require(t, opts.Home)
	if opts.Name == "" {
		opts.Name = t.Name()
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	t0 := time.Now()
	c, err := StartCluster(ctx, opts)
	if err != nil {
		t.Fatalf("kafkatest: start %d broker(s): %v", max(opts.Brokers, 1), err)
	}
	t.Logf("kafkatest: %d broker(s) serving at %s after %s (dir %s)",
		c.Len(), strings.Join(c.Addrs(), ","), time.Since(t0).Round(time.Millisecond), c.Dir())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafkatest: broker logs:\n%s", c.LogTails())
		}
		if err := c.Close(); err != nil {
			t.Errorf("kafkatest: %v", err)
		}
	})
	return c
}

// shared is the test binary's one-broker cluster (Shared), started on
// first use and closed by CloseShared.
var shared struct {
	mu      sync.Mutex
	cluster *Cluster
	err     error
	started bool
}

// Shared returns the test binary's one-broker cluster with the default
// settings, starting it on first use, for tests that neither stop, kill
// nor reconfigure a broker. Each such test uses its own topics (its own
// slot). It lives until CloseShared, which the test binary's TestMain
// must call (pgtest.Main(m, kafkatest.CloseShared)). When t fails, the
// broker's log tail is printed.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	Require(t, "")
	shared.mu.Lock()
	if !shared.started {
		shared.started = true
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		t0 := time.Now()
		shared.cluster, shared.err = StartCluster(ctx, Options{Name: "shared"})
		cancel()
		if shared.err == nil {
			t.Logf("kafkatest: shared broker serving at %s after %s (dir %s)",
				strings.Join(shared.cluster.Addrs(), ","), time.Since(t0).Round(time.Millisecond), shared.cluster.Dir())
		}
	}
	c, err := shared.cluster, shared.err
	shared.mu.Unlock()
	if err != nil {
		t.Fatalf("kafkatest: start the shared broker: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafkatest: shared broker log:\n%s", c.LogTails())
		}
	})
	return c
}

// CloseShared closes the cluster Shared started, if any.
func CloseShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster != nil {
		if err := shared.cluster.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "kafkatest: %v\n", err)
		}
		shared.cluster = nil
	}
}

// Require skips t (or, with REPSTREAM_REQUIRE_KAFKA set, fails it) when
// brokers cannot run from home ("" means Home()).
func Require(t testing.TB, home string) {
	t.Helper()
	if err := Available(home); err != nil {
		if required() {
			t.Fatalf("kafkatest: %v (%s is set)", err, EnvRequire)
		}
		t.Skipf("kafkatest: skipped: %v; set %s=1 to fail instead", err, EnvRequire)
	}
}

func required() bool {
	v := os.Getenv(EnvRequire)
	return v != "" && v != "0"
}

// Client returns a franz-go client seeded with every broker of c, closed in
// t.Cleanup. Its producer is franz-go's default: idempotent, acks=all.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...)}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("kafkatest: new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client of c, closed in t.Cleanup.
func (c *Cluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(c.Client(t))
}

// CreateTopic creates topic with the given partitions, replication factor
// and topic configs (nil values are ignored), and waits until every
// partition has a leader. It fails t on error.
func (c *Cluster) CreateTopic(t testing.TB, topic string, partitions int32, rf int16, configs map[string]string) {
	t.Helper()
	adm := c.Admin(t)
	cfg := make(map[string]*string, len(configs))
	for k, v := range configs {
		cfg[k] = &v
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, rf, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: create topic %s: %v", topic, err)
	}
	for {
		leaders, err := c.leaders(ctx, adm, topic)
		if err == nil && len(leaders) == int(partitions) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: topic %s has no leader for every partition after a minute (last error: %v)", topic, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Leader returns the index of the broker leading topic's partition, as the
// running brokers' metadata tells; it fails t when there is none.
func (c *Cluster) Leader(t testing.TB, topic string, partition int32) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := c.Admin(t)
	for {
		// A topic just made may not be known yet to the broker asked
		// (UNKNOWN_TOPIC_OR_PARTITION, retriable), or have no leader.
		leaders, err := c.leaders(ctx, adm, topic)
		if i, ok := leaders[partition]; err == nil && ok {
			return i
		}
		if err != nil && !kerr.IsRetriable(err) && !errors.Is(err, errNotInMetadata) {
			t.Fatalf("kafkatest: leader of %s/%d: %v", topic, partition, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: %s/%d has no leader after 30 s (%v)", topic, partition, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var errNotInMetadata = errors.New("not in metadata")

// leaders maps each of topic's partitions that has a leader to that
// leader's broker index.
func (c *Cluster) leaders(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := md.Topics[topic]
	if !ok {
		return nil, fmt.Errorf("topic %s: %w", topic, errNotInMetadata)
	}
	if td.Err != nil {
		return nil, td.Err
	}
	out := map[int32]int{}
	for p, pd := range td.Partitions {
		if pd.Err == nil && pd.Leader >= 0 {
			if i := c.Index(pd.Leader); i >= 0 {
				out[p] = i
			}
		}
	}
	return out, nil
}
