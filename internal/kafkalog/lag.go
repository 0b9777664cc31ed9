package kafkalog

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgoutput"
)

// A target's lag, read from the topic (`status --kafka`): the topic's last
// commit (Tail) says whether a target has applied everything the topic
// holds, whatever Kafka's transaction markers add to its end offset; a
// target that has not lacks the transactions from the first commit it does
// not hold, whose source timestamp FirstMissingCommit reads.

// Commit is a transaction's commit as a record of the topic holds it.
type Commit struct {
	End    change.LSN // the transaction's end LSN
	Time   time.Time  // its commit timestamp on the source
	Offset int64      // the record holding its Commit (or Stream Commit) message
}

// firstMissingScan and firstMissingBytes bound what FirstMissingCommit
// reads: the record a target's offset names is that of the oldest
// transaction it has not applied, so the first commit it lacks is close by
// unless that transaction is a large one (about 20 MiB in 24 records per
// 200,000 rows).
const (
	firstMissingScan  = 4096
	firstMissingBytes = 64 << 20
)

// FirstMissingCommit reads topic from offset from (a target's recorded
// resume offset: every transaction it has not applied starts at or after
// it) up to end and returns the first commit whose end LSN applied does
// not hold: the oldest transaction of the topic the target lacks. found is
// false when none is within end, the first firstMissingScan records or
// their first firstMissingBytes.
func FirstMissingCommit(ctx context.Context, c Cluster, topic string, from, end int64, applied func(change.LSN) bool) (cm Commit, found bool, err error) {
	if from >= end {
		return Commit{}, false, nil
	}
	cl, err := kgo.NewClient(c.opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.KeepControlRecords(), kgo.FetchMaxBytes(4<<20))...)
	if err != nil {
		return Commit{}, false, err
	}
	defer cl.Close()
	// Control records (Kafka's transaction markers) are kept to be passed
	// over: skipped by the client, the last ones before stop would leave
	// the loop waiting for offsets it never sees.
	stop := min(end, from+firstMissingScan)
	var bad error
	var read int
	for next := from; next < stop && !found && bad == nil && read < firstMissingBytes; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return Commit{}, false, fmt.Errorf("read topic %s from offset %d: %w", topic, from, err)
		}
		for _, fe := range fs.Errors() {
			return Commit{}, false, fmt.Errorf("read topic %s from offset %d: %w", topic, from, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = max(next, r.Offset+1)
			if found || bad != nil || r.Attrs.IsControl() || r.Offset < from || r.Offset >= stop {
				return
			}
			read += len(r.Value)
			c, ok, err := missingCommitIn(r.Value, applied)
			switch {
			case err != nil:
				bad = fmt.Errorf("topic %s offset %d: %w", topic, r.Offset, err)
			case ok:
				c.Offset = r.Offset
				cm, found = c, true
			}
		})
	}
	if bad != nil {
		return Commit{}, false, bad
	}
	return cm, found, nil
}

// missingCommitIn returns the first commit of a record's value (a Commit
// or Stream Commit message) whose end LSN applied does not hold. Epoch
// markers and fragments hold none (a commit message is never fragmented).
func missingCommitIn(v []byte, applied func(change.LSN) bool) (Commit, bool, error) {
	h, body, err := ParseHeader(v)
	if err != nil || h.Kind != KindData {
		return Commit{}, false, err
	}
	var cm Commit
	found := false
	err = Frames(body, func(f Frame) error {
		if found || f.Data[0] != pgoutput.MsgCommit && f.Data[0] != pgoutput.MsgStreamCommit {
			return nil
		}
		var m pgoutput.Message
		if err := pgoutput.Parse(f.Data, false, int(h.Proto), &m); err != nil {
			return fmt.Errorf("%w: at %s: %w", ErrCorrupt, f.WALStart, err)
		}
		if !applied(m.EndLSN) {
			cm, found = Commit{End: m.EndLSN, Time: m.Time}, true
		}
		return nil
	})
	return cm, found, err
}
