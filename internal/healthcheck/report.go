package healthcheck

import (
	"fmt"
	"io"
	"strings"
)

// Level is an item's verdict.
type Level string

// The levels, from good to bad.
const (
	OK   Level = "OK"
	Warn Level = "WARN"
	Fail Level = "FAIL"
)

// Item is one checked fact.
type Item struct {
	Level Level `json:"level"`
	// Side is "source" or "target".
	Side string `json:"side"`
	// Check names what was checked: a setting, "table public.t", "slot".
	Check  string `json:"check"`
	Detail string `json:"detail"`
	// Fix says what to do; empty for OK items.
	Fix string `json:"fix,omitempty"`
}

// Report is every item, in the order checked.
type Report struct {
	Items []Item `json:"items"`
}

// Count returns how many items have level l.
func (r *Report) Count(l Level) int {
	n := 0
	for _, it := range r.Items {
		if it.Level == l {
			n++
		}
	}
	return n
}

func (r *Report) add(l Level, side, check, fix, format string, args ...any) {
	r.Items = append(r.Items, Item{Level: l, Side: side, Check: check, Detail: fmt.Sprintf(format, args...), Fix: fix})
}

// WriteText prints one line per item — "FAIL source wal_level: replica
// (fix: ...)" — and a summary line.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, it := range r.Items {
		fmt.Fprintf(&b, "%-4s  %-6s  %s: %s", it.Level, it.Side, it.Check, it.Detail)
		if it.Fix != "" {
			fmt.Fprintf(&b, " (fix: %s)", it.Fix)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%d OK, %d WARN, %d FAIL\n", r.Count(OK), r.Count(Warn), r.Count(Fail))
	_, err := io.WriteString(w, b.String())
	return err
}
