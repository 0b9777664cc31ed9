package kafkalog

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
)

// pgEpoch is pgoutput's timestamp origin.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// commitAt is a Commit message (streamed: a Stream Commit of xid 7)
// ending at end, committed at t.
func commitAt(streamed bool, end uint32, t time.Time) []byte {
	b := []byte{'C', 0}
	if streamed {
		b = binary.BigEndian.AppendUint32([]byte{'c'}, 7)
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(end-8))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, uint64(t.Sub(pgEpoch).Microseconds()))
}

func dataRecord(msgs ...[]byte) []byte {
	v := AppendHeader(nil, Header{Kind: KindData, Epoch: 1, Proto: 2})
	for i, m := range msgs {
		v = AppendFrame(v, Frame{WALStart: change.LSN(0x100 + i), Data: m})
	}
	return v
}

// TestMissingCommitIn: the first commit of a record a target lacks, by
// its end LSN (Commit and Stream Commit alike), with its source time;
// none in an epoch marker, a fragment, or a record of commits it holds.
func TestMissingCommitIn(t *testing.T) {
	t1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t2, t3 := t1.Add(time.Second), t1.Add(2*time.Second)
	upTo := func(low change.LSN) func(change.LSN) bool {
		return func(end change.LSN) bool { return end <= low }
	}
	rec := dataRecord(rvBegin(0x1000, 1), commitAt(false, 0x1010, t1),
		rvStreamStart(7, true), []byte{'E'}, commitAt(true, 0x1020, t2),
		rvBegin(0x1030, 3), commitAt(false, 0x1040, t3))
	for _, tc := range []struct {
		name    string
		applied func(change.LSN) bool
		found   bool
		end     change.LSN
		at      time.Time
	}{
		{"lacks all", upTo(0), true, 0x1010, t1},
		{"lacks the streamed one on", upTo(0x1010), true, 0x1020, t2},
		{"lacks the last", upTo(0x1020), true, 0x1040, t3},
		{"holds all", upTo(0x1040), false, 0, time.Time{}},
		{"a gap above the low watermark", func(end change.LSN) bool { return end != 0x1020 }, true, 0x1020, t2},
	} {
		c, ok, err := missingCommitIn(rec, tc.applied)
		if err != nil || ok != tc.found || c.End != tc.end || !c.Time.Equal(tc.at) {
			t.Errorf("%s: %+v %v %v, want end %s at %s (found %v)", tc.name, c, ok, err, tc.end, tc.at, tc.found)
		}
	}
	for name, v := range map[string][]byte{
		"epoch marker": AppendEpoch(AppendHeader(nil, Header{Kind: KindEpoch, Epoch: 2, LastCommit: 0x1040}), Epoch{Start: 0x1040, Slot: "s"}),
		"fragment":     AppendFragment(AppendHeader(nil, Header{Kind: KindFragment, Epoch: 2}), 0x2000, 100, 0, commitAt(false, 0x3000, t1)),
		"no commit":    dataRecord(rvBegin(0x1000, 1), rvInsert(0, 1, "x")),
	} {
		if c, ok, err := missingCommitIn(v, upTo(0)); ok || err != nil {
			t.Errorf("%s: %+v %v %v, want none", name, c, ok, err)
		}
	}
	if _, _, err := missingCommitIn(dataRecord([]byte{'C', 0, 1}), upTo(0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a truncated commit: %v, want ErrCorrupt", err)
	}
	if _, _, err := missingCommitIn([]byte("not ours"), upTo(0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a foreign record: %v, want ErrCorrupt", err)
	}
}
