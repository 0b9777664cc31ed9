package kafkalog

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTopicFits: a topic that could not hold every record of a slot's
// stream, in order, is refused with the setting and the fix named; one
// whose configuration the brokers did not show ("?") is taken as it is.
func TestTopicFits(t *testing.T) {
	ok := TopicInfo{Name: "repstream.s", Partitions: 1, CleanupPolicy: "delete", MaxMessageBytes: "1048588", RetentionMs: "604800000"}
	for _, c := range []struct {
		name string
		edit func(*TopicInfo)
		want string // "" = fits
	}{
		{"defaults", func(*TopicInfo) {}, ""},
		{"not described", func(i *TopicInfo) { i.CleanupPolicy, i.MaxMessageBytes = "?", "?" }, ""},
		{"exactly the batch", func(i *TopicInfo) { i.MaxMessageBytes = strconv.Itoa(MaxBatchBytes) }, ""},
		{"partitions", func(i *TopicInfo) { i.Partitions = 3 }, "has 3 partitions"},
		{"compacted", func(i *TopicInfo) { i.CleanupPolicy = "compact" }, "cleanup.policy=compact: a slot's stream needs every record"},
		{"compacted and deleted", func(i *TopicInfo) { i.CleanupPolicy = "compact,delete" }, "--add-config cleanup.policy=delete"},
		{"small messages", func(i *TopicInfo) { i.MaxMessageBytes = "65536" }, "max.message.bytes=65536: the capture writes batches of up to " + strconv.Itoa(MaxBatchBytes)},
		{"one byte short", func(i *TopicInfo) { i.MaxMessageBytes = strconv.Itoa(MaxBatchBytes - 1) }, "--add-config max.message.bytes=" + strconv.Itoa(MaxBatchBytes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := ok
			c.edit(&i)
			err := i.Fits()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "repstream.s")):
				t.Fatalf("got %v, want an error naming the topic and %q", err, c.want)
			}
		})
	}
}

// TestEpochSameSource: an epoch marker of another system or another
// database (another OID: dropped and made again under the same name;
// another name: a server cloned from the same base backup) is refused,
// naming both and the way out for the half that asks; what is unknown on
// either side is not compared (a marker of an earlier capture has no
// OID).
func TestEpochSameSource(t *testing.T) {
	e := Epoch{SystemID: "7300000000000000001", DatabaseOID: 16384, Database: "shop", Slot: "s"}
	old := Epoch{SystemID: "7300000000000000001", Database: "shop", Slot: "s"} // an earlier capture's
	for _, c := range []struct {
		name, who string
		e         Epoch
		src       Source
		want      string // "" = the same source
	}{
		{"same", "capture", e, Source{"7300000000000000001", 16384, "shop"}, ""},
		{"same OID, another name (a clone's database)", "apply", e, Source{"7300000000000000001", 16384, "boutique"}, `this apply's source is system identifier 7300000000000000001, database "boutique" (OID 16384)`},
		{"system unknown here", "apply", e, Source{"", 16384, "shop"}, ""},
		{"nothing known", "apply", e, Source{}, ""},
		{"made again", "capture", e, Source{"7300000000000000001", 16999, "shop"},
			`database "shop" (OID 16384); this capture's source is system identifier 7300000000000000001, database "shop" (OID 16999) (a database of that name was dropped and made again`},
		{"other database", "capture", e, Source{"7300000000000000001", 16999, "hr"}, `this capture's source is system identifier 7300000000000000001, database "hr" (OID 16999): give this capture another --slot`},
		{"other system", "apply", e, Source{"7399999999999999999", 16384, "shop"}, "point --source at the database the capture of slot s reads"},
		{"other database, system unknown", "apply", e, Source{"", 16384, "hr"}, "this apply's source is system identifier (unknown)"},
		{"earlier capture, same", "apply", old, Source{"7300000000000000001", 16999, "shop"}, ""},
		{"earlier capture, other database", "apply", old, Source{"7300000000000000001", 16999, "hr"}, `database "shop" (OID unknown)`},
		{"earlier capture, other system", "capture", old, Source{"7399999999999999999", 16384, "shop"}, "give this capture another --slot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.e.SameSource("repstream.s", c.who, c.src)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (!errors.Is(err, ErrOtherSource) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "repstream.s")):
				t.Fatalf("got %v, want ErrOtherSource naming the topic and %q", err, c.want)
			}
		})
	}
	if err := (Epoch{Database: "shop"}).SameSource("t", "capture", Source{"1", 5, "shop"}); err != nil {
		t.Errorf("a marker without a system identifier: %v", err)
	}
}

// TestEpochRecordHeaders: the database's OID travels in the marker
// record's header (the value an earlier apply reads is unchanged); a
// marker without it (an earlier capture's) reads as OID 0; a damaged one
// is refused.
func TestEpochRecordHeaders(t *testing.T) {
	e := Epoch{Start: 9, SystemID: "1", DatabaseOID: 16384, Database: "shop", Slot: "s", Publication: "p"}
	body := AppendEpoch(nil, e)
	got, err := ParseEpochRecord(body, append([]kgo.RecordHeader{{Key: "other", Value: []byte("x")}}, EpochHeaders(e)...))
	if err != nil || got != e {
		t.Fatalf("got %+v, %v; want %+v", got, err, e)
	}
	if got, err := ParseEpochRecord(body, nil); err != nil || got.DatabaseOID != 0 || got.Database != "shop" {
		t.Fatalf("without the header: %+v, %v", got, err)
	}
	if len(EpochHeaders(Epoch{})) != 0 {
		t.Errorf("headers for an unknown OID: %v", EpochHeaders(Epoch{}))
	}
	for _, v := range [][]byte{{0, 1}, {0, 0, 0, 0}, {0, 0, 0, 1, 2}} {
		if _, err := ParseEpochRecord(body, []kgo.RecordHeader{{Key: DatabaseOIDHeader, Value: v}}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("header %x: %v, want ErrCorrupt", v, err)
		}
	}
}

// TestCompression: each name --kafka-compression takes is a codec, ""
// the default (snappy); another name is refused, listing them.
func TestCompression(t *testing.T) {
	for _, name := range append([]string{""}, Compressions...) {
		if _, err := Compression(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	if c, _ := Compression(""); c != kgo.SnappyCompression() {
		t.Errorf("the default is %v, want snappy", c)
	}
	if c, _ := Compression("none"); c != kgo.NoCompression() {
		t.Errorf("none is %v", c)
	}
	if c, _ := Compression("zstd"); c != kgo.ZstdCompression() {
		t.Errorf("zstd is %v", c)
	}
	_, err := Compression("gzip9")
	if err == nil || !strings.Contains(err.Error(), `--kafka-compression "gzip9": one of none, snappy, lz4, zstd`) {
		t.Errorf("got %v", err)
	}
}
