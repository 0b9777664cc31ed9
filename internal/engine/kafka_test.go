package engine

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/syncbuf"
)

// closedDSN is a PostgreSQL DSN on a port nothing listens on.
func closedDSN(t *testing.T) (dsn, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	host, port, _ := net.SplitHostPort(addr)
	return "host=" + host + " port=" + port + " user=nobody dbname=nothing connect_timeout=3 sslmode=disable", addr
}

// A passing error of the brokers at a half's start (a partition without a
// leader, as right after a broker's restart or the topic's creation:
// LEADER_NOT_AVAILABLE) is waited for and the start tried again, also
// before the half has reached its servers once (issue 30): the brokers
// answered, they are not a wrong address. Each half here goes on past
// its Kafka checks to its source, which nothing serves, and stops there
// at once, as a source that cannot be reached at the first start does.
func TestKafkaStartWaitsForPassingBrokerErrors(t *testing.T) {
	for _, c := range []struct {
		role  config.Role
		fault kfake.Fault // what the brokers answer, Count times, before they answer right
	}{
		// The apply's first request of the topic: its offsets.
		{config.RoleApply, kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Err: kerr.LeaderNotAvailable, Count: 2}},
		// The capture's look at its topic (EnsureTopic); the client
		// asks again once itself before it returns the error.
		{config.RoleCapture, kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Err: kerr.LeaderNotAvailable, Count: 4}},
	} {
		t.Run(string(c.role), func(t *testing.T) {
			slot := "passing_" + string(c.role)
			topic := kafkalog.Topic(slot)
			k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			f := c.fault
			f.Topic = topic
			h := k.Fault(f)
			dsn, srcAddr := closedDSN(t)
			cfg := config.Config{Role: c.role, Kafka: strings.Join(k.ListenAddrs(), ","), Slot: slot, Publication: "pub",
				Source: dsn, Target: dsn, ReconnectMaxWait: 2 * time.Second}
			var logs syncbuf.Buffer
			e := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			t0 := time.Now()
			err = e.runHalf(ctx)
			t.Logf("%s stopped after %s: %v", c.role, time.Since(t0).Round(time.Millisecond), err)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("%s: runHalf = %v (ctx %v), want the source's connection error\n%s", c.role, err, ctx.Err(), logs.String())
			}
			if strings.Contains(err.Error(), "LEADER_NOT_AVAILABLE") || !strings.Contains(err.Error(), srcAddr) {
				t.Fatalf("%s stopped on %v; want it to wait out LEADER_NOT_AVAILABLE and stop on the source it cannot reach (%s)\n%s", c.role, err, srcAddr, logs.String())
			}
			if n := h.Hits(); n != f.Count {
				t.Errorf("the brokers answered LEADER_NOT_AVAILABLE %d times, want %d", n, f.Count)
			}
			var waits int
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, "LEADER_NOT_AVAILABLE") && strings.Contains(l, "side=kafka") {
					waits++
				}
			}
			if waits == 0 {
				t.Errorf("no warning names the passing error and the brokers:\n%s", logs.String())
			}
		})
	}
}

// The apply's read of the values' format the capture writes (the topic's
// last record) waits out a passing error of the brokers rather than take
// it for "not known" (text), which would let a target that cannot take
// binary values start and stop at its first change.
func TestKafkaTopicFormatWaitsForPassingBrokerErrors(t *testing.T) {
	topic := kafkalog.Topic("format")
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	brokers, err := kafkalog.NewCluster(strings.Join(k.ListenAddrs(), ","), kafkalog.Security{})
	if err != nil {
		t.Fatal(err)
	}
	adm, cl, err := kafkalog.NewAdmin(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	v := kafkalog.AppendHeader(nil, kafkalog.Header{Kind: 'E', Epoch: 1, LastCommit: 0x100, Proto: 4, Binary: true})
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h := k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: topic, Err: kerr.LeaderNotAvailable, Count: 2})
	var logs syncbuf.Buffer
	e := New(config.Config{Role: config.RoleApply, ReconnectMaxWait: time.Second}, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if !e.topicFormat(ctx, adm, brokers, topic) {
		t.Fatalf("the topic's last record, binary, read as text (fault hits %d)\n%s", h.Hits(), logs.String())
	}
	if n := h.Hits(); n != 2 {
		t.Errorf("the brokers answered LEADER_NOT_AVAILABLE %d times, want 2", n)
	}
	if !strings.Contains(logs.String(), "LEADER_NOT_AVAILABLE") {
		t.Errorf("no log line names the passing error:\n%s", logs.String())
	}
}
