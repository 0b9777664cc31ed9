package kafkalog

import (
	"strconv"
	"strings"
	"testing"
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
