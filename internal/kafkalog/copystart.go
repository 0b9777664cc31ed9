package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
)

// CopyStart returns the offset from which a new target, whose initial copy
// began after the capture's slot had restart, must read the topic: the
// first record holding the last commit that ends before restart (from, the
// topic's first offset, when there is none).
//
// Why it is enough: a transaction that commits after the copy's snapshot
// was not committed and confirmed when the slot's restart_lsn became
// restart, so its first change is at or after restart. The capture writes
// the slot's messages in the order the walsender decodes the WAL, so every
// message of such a transaction comes after every commit that ends before
// restart; a later capture session that decodes it again writes it again
// after its epoch marker, and a session never writes a commit the topic
// already holds. The records' last-commit field (Header.LastCommit, the
// end of the last commit in the record or an earlier one) never decreases,
// so two binary searches find that record. What the reader meets before
// a transaction's start (the end of one begun earlier) it drops, as when
// it resumes.
func CopyStart(ctx context.Context, adm *kadm.Client, c Cluster, topic string, restart change.LSN, from int64) (int64, error) {
	_, end, err := Offsets(ctx, adm, topic)
	if err != nil || restart == 0 || end <= from {
		return from, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// f: the first offset from which the first record's last commit is at
	// or past restart.
	f, err := lowerBound(ctx, c, topic, from, end, func(h Header) bool { return h.LastCommit >= restart })
	if err != nil || f == from {
		return from, err
	}
	// The record before f holds, or follows, the last commit before
	// restart: the first record with that last commit holds it.
	var before *kgo.Record
	for span := int64(8); before == nil; span *= 4 {
		lo := max(from, f-span)
		if before, err = lastRecord(ctx, c, topic, lo, f); err != nil {
			return from, err
		}
		if before == nil && lo == from {
			return from, nil
		}
	}
	h, _, err := ParseHeader(before.Value)
	if err != nil {
		return from, fmt.Errorf("topic %s offset %d: %w", topic, before.Offset, err)
	}
	return lowerBound(ctx, c, topic, from, f, func(g Header) bool { return g.LastCommit >= h.LastCommit })
}

// LastEpoch returns the epoch marker of the last capture session that
// wrote topic: the first record of the tail's epoch (headers' epochs never
// decrease). nil: the topic holds no record, or retention removed that
// marker.
func LastEpoch(ctx context.Context, adm *kadm.Client, c Cluster, topic string) (*Epoch, error) {
	tail, err := Tail(ctx, adm, c, topic)
	if err != nil || tail.Empty {
		return nil, err
	}
	start, end := tail.Start, tail.End
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	f, err := lowerBound(ctx, c, topic, start, end, func(h Header) bool { return h.Epoch >= tail.Epoch })
	if err != nil {
		return nil, err
	}
	r, err := firstRecord(ctx, c, topic, f, end)
	if err != nil || r == nil {
		return nil, err
	}
	h, body, err := ParseHeader(r.Value)
	if err != nil {
		return nil, fmt.Errorf("topic %s offset %d: %w", topic, r.Offset, err)
	}
	if h.Kind != KindEpoch {
		return nil, nil
	}
	e, err := ParseEpochRecord(body, r.Headers)
	if err != nil {
		return nil, fmt.Errorf("topic %s offset %d: %w", topic, r.Offset, err)
	}
	return &e, nil
}

// ErrOtherSource: a topic holds the stream of another source than the
// one a capture or an apply was given.
var ErrOtherSource = errors.New("the topic holds the stream of another source")

// Source names a source database: its server's system identifier, its
// OID and its name ("" and 0: unknown).
type Source struct {
	SystemID    string
	DatabaseOID uint32
	Database    string
}

func (s Source) String() string {
	oid := "unknown"
	if s.DatabaseOID != 0 {
		oid = fmt.Sprint(s.DatabaseOID)
	}
	return fmt.Sprintf("system identifier %s, database %q (OID %s)", orUnknown(s.SystemID), s.Database, oid)
}

// Source is the source database e's capture read.
func (e Epoch) Source() Source {
	return Source{SystemID: e.SystemID, DatabaseOID: e.DatabaseOID, Database: e.Database}
}

// SameSource checks that e was written by a capture of the source
// database src: the same system identifier, database OID and name, each
// compared where both sides know it. The name alone does not tell a
// database dropped and made again under it (from a copy or a dump: another
// OID), nor the system identifier alone servers cloned from one base
// backup (their databases made since may share an OID under other names).
// A marker of a capture of an earlier version carries no OID, and is
// checked as that version did (system identifier and name). who says
// which half asks ("capture", "apply"), for the error, which names both
// sources and the way out.
func (e Epoch) SameSource(topic, who string, src Source) error {
	sysid, oid, db := src.SystemID, src.DatabaseOID, src.Database
	if (sysid == "" || e.SystemID == "" || sysid == e.SystemID) &&
		(oid == 0 || e.DatabaseOID == 0 || oid == e.DatabaseOID) &&
		(db == "" || e.Database == "" || db == e.Database) {
		return nil
	}
	why := ""
	if sysid != "" && sysid == e.SystemID && db == e.Database {
		why = " (a database of that name was dropped and made again since that capture: another OID, another source)"
	}
	fix := "give this capture another --slot, or, if that stream is no longer wanted, delete the topic (every apply of it then copies again)"
	if who == "apply" {
		fix = "point --source at the database the capture of slot " + e.Slot + " reads"
	}
	return fmt.Errorf("%w: topic %s was written by a capture of %s; this %s's source is %s%s: %s",
		ErrOtherSource, topic, e.Source(), who, src, why, fix)
}

// SamePublication checks that e's capture streamed publication pub (an
// apply's --publication): an apply of another copied that one's tables
// and read this one's stream, and stopped only at a change of a table it
// lacked, with advice beside the point.
func (e Epoch) SamePublication(topic, pub string) error {
	if e.Publication == "" || pub == "" || e.Publication == pub {
		return nil
	}
	return fmt.Errorf("topic %s is the stream of publication %q (its capture's, slot %s); this apply's --publication is %q: give --publication %s, or leave it out",
		topic, e.Publication, e.Slot, pub, e.Publication)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// CheckSource returns ErrOtherSource when topic's last capture session
// read another source database than src (nil as well when the topic has
// no epoch marker to tell).
func CheckSource(ctx context.Context, adm *kadm.Client, c Cluster, topic, who string, src Source) error {
	e, err := LastEpoch(ctx, adm, c, topic)
	if err != nil || e == nil {
		return err
	}
	return e.SameSource(topic, who, src)
}

// lowerBound returns the least offset in [lo, hi) from which the first
// record that is not a control record has a header for which ok holds
// (hi: none). ok must hold from some offset on, as it does of a last
// commit or an epoch at least some value: neither ever decreases.
func lowerBound(ctx context.Context, c Cluster, topic string, lo, hi int64, ok func(Header) bool) (int64, error) {
	for lo < hi {
		mid := lo + (hi-lo)/2
		r, err := firstRecord(ctx, c, topic, mid, hi)
		if err != nil {
			return 0, err
		}
		if r == nil {
			hi = mid
			continue
		}
		h, _, err := ParseHeader(r.Value)
		if err != nil {
			return 0, fmt.Errorf("topic %s offset %d: %w", topic, r.Offset, err)
		}
		if ok(h) {
			hi = mid
		} else {
			lo = r.Offset + 1
		}
	}
	return lo, nil
}

// firstRecord reads topic from offset from and returns its first record
// before end that is not a control record (nil: none).
func firstRecord(ctx context.Context, c Cluster, topic string, from, end int64) (*kgo.Record, error) {
	cl, err := kgo.NewClient(c.opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.KeepControlRecords(), kgo.FetchMaxBytes(4<<20))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for next := from; next < end; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read topic %s at offset %d: %w", topic, from, err)
		}
		for _, fe := range fs.Errors() {
			return nil, fmt.Errorf("read topic %s at offset %d: %w", topic, from, fe.Err)
		}
		var first *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < from {
				return
			}
			next = max(next, r.Offset+1)
			if first == nil && !r.Attrs.IsControl() && r.Offset < end {
				first = r
			}
		})
		if first != nil {
			return first, nil
		}
	}
	return nil, nil
}
