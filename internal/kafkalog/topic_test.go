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
// database is refused, naming both and the way out for the half that
// asks; what is unknown on either side is not compared.
func TestEpochSameSource(t *testing.T) {
	e := Epoch{SystemID: "7300000000000000001", Database: "shop", Slot: "s"}
	for _, c := range []struct {
		name, who, sysid, db string
		want                 string // "" = the same source
	}{
		{"same", "capture", "7300000000000000001", "shop", ""},
		{"system unknown here", "apply", "", "shop", ""},
		{"nothing known", "apply", "", "", ""},
		{"other database", "capture", "7300000000000000001", "hr", `database "shop"; this capture's source is system identifier 7300000000000000001, database "hr": give this capture another --slot`},
		{"other system", "apply", "7399999999999999999", "shop", "point --source at the database the capture of slot s reads"},
		{"other database, system unknown", "apply", "", "hr", "this apply's source is system identifier (unknown)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := e.SameSource("repstream.s", c.who, c.sysid, c.db)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (!errors.Is(err, ErrOtherSource) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "repstream.s")):
				t.Fatalf("got %v, want ErrOtherSource naming the topic and %q", err, c.want)
			}
		})
	}
	if err := (Epoch{Database: "shop"}).SameSource("t", "capture", "1", "shop"); err != nil {
		t.Errorf("a marker without a system identifier: %v", err)
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
