package monitor

import (
	"fmt"
	"math"
	"strings"
)

// Legend is the line `repstream top` prints first: the components the
// abbreviations of FormatLine name (at most 80 columns).
const Legend = "CAP capture, Q queue, APL apply workers; B/I/F: % busy/idle/flow control"

// Header is the line `repstream top` prints before the first interval: what
// the abbreviations of FormatLine stand for.
const Header = "TIME     CAP chg/s B/s B/I/F% | Q mem [SP spilled] | APL(n) chg/s B/I/F% | lag"

// FormatLine renders an interval as one line of at most 80 columns in
// practice (a few more in an interval that spilled):
//
//	14:25:50 CAP 12.3k 1.2M B0 I95 F5 | Q 2.1M | APL(4) 12.1k B90 I10 F0 | lag 1.2M
//
// CAP is capture (changes and bytes a second), Q the queue's memory (SP what
// it spilled during the interval, only when it did), APL the apply workers
// together (changes a second), SNAP the initial copy while it copies
// (rows a second); sizes are bytes (K, M, G: powers of
// 1024), counts use k and M (powers of 1000). EGR eager apply when it applied anything.
// B, I and F are the percentages of the interval spent busy, idle and
// waiting (flow control). lag is the WAL received but not yet durably
// applied ("?" without positions). Times are printed in UTC. For the
// halves joined by Kafka: a capture prints "unacked", the WAL received
// and not yet acknowledged by the brokers, instead of lag; an apply adds
// TOPIC, the records of the topic it has not read yet.
func FormatLine(iv Interval) string {
	var b strings.Builder
	b.WriteString(iv.Time.UTC().Format("15:04:05"))
	if c, ok := iv.Component("capture"); ok {
		fmt.Fprintf(&b, " CAP %s %s %s", count(c.ItemsPerSec), size(c.BytesPerSec), shares(c))
	}
	fmt.Fprintf(&b, " | Q %s", size(float64(iv.QueueBytes)))
	if iv.SpilledBytes > 0 {
		fmt.Fprintf(&b, " SP %s", size(float64(iv.SpilledBytes)))
	}
	if a, ok := iv.Component(Apply); ok {
		fmt.Fprintf(&b, " | APL(%d) %s %s", a.Workers, count(a.ItemsPerSec), shares(a))
	}
	if e, ok := iv.Component("eager"); ok && e.ItemsPerSec > 0 {
		fmt.Fprintf(&b, " | EGR %s %s", count(e.ItemsPerSec), shares(e))
	}
	if sn, ok := iv.Component("snapshot"); ok && sn.ItemsPerSec > 0 {
		fmt.Fprintf(&b, " | SNAP %s %s", count(sn.ItemsPerSec), shares(sn))
	}
	if iv.Role == "apply" {
		if iv.TopicLagRecords < 0 {
			b.WriteString(" | TOPIC ?")
		} else {
			fmt.Fprintf(&b, " | TOPIC %s rec", count(float64(iv.TopicLagRecords)))
		}
	}
	lag := "lag"
	if iv.Role == "capture" {
		lag = "unacked" // by the brokers
	}
	if iv.BehindBytes < 0 {
		fmt.Fprintf(&b, " | %s ?", lag)
	} else {
		fmt.Fprintf(&b, " | %s %s", lag, size(float64(iv.BehindBytes)))
	}
	return b.String()
}

func shares(l Load) string {
	return fmt.Sprintf("B%d I%d F%d", pct(l.Busy), pct(l.Idle), pct(l.Waiting))
}

func pct(f float64) int { return int(math.Round(f * 100)) }

// count renders a rate with k/M suffixes in at most 5 characters.
func count(v float64) string {
	switch {
	case v >= 999.5e3:
		return trim(v/1e6) + "M"
	case v >= 999.5:
		return trim(v/1e3) + "k"
	}
	return fmt.Sprintf("%.0f", v)
}

// size renders bytes with K/M/G (powers of 1024) suffixes.
func size(v float64) string {
	switch {
	case v >= 1<<30:
		return trim(v/(1<<30)) + "G"
	case v >= 1<<20:
		return trim(v/(1<<20)) + "M"
	case v >= 1<<10:
		return trim(v/(1<<10)) + "K"
	}
	return fmt.Sprintf("%.0fB", v)
}

// trim prints one decimal below 100, none above.
func trim(v float64) string {
	if v >= 99.95 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
