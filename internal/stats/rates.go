package stats

import (
	"math"
	"strconv"
)

// Rate is what one component did between two snapshots.
type Rate struct {
	Name string `json:"name"`
	// Seconds is the length of the interval.
	Seconds     float64 `json:"seconds"`
	ItemsPerSec float64 `json:"items_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	TxnsPerSec  float64 `json:"txns_per_sec"`
	// Busy, Idle and Waiting are the fractions of the interval spent in each
	// state, in [0, 1]. They add up to 1 for a component that existed for the
	// whole interval, to less for one created during it.
	Busy    float64 `json:"busy"`
	Idle    float64 `json:"idle"`
	Waiting float64 `json:"waiting"`
	// State is the component's state at the end of the interval.
	State string `json:"state"`
}

// Rates returns, for every pipeline stage of cur (in cur's order; the
// auxiliary components of names.go hold facts, not work, and are left out), its throughput
// and the share of the interval prev→cur it spent in each state. The interval
// is measured on the registry's uptime, so it survives a JSON round trip.
//
// A component missing from prev counts from zero (it was created during the
// interval). A component whose values went backwards (a restarted process)
// also counts from zero. If the interval is not positive every rate is zero.
func Rates(prev, cur Snapshot) []Rate {
	dt := cur.Uptime - prev.Uptime
	out := make([]Rate, 0, len(cur.Components))
	for _, c := range cur.Components {
		if isAuxiliary(c.Name) {
			continue
		}
		r := Rate{Name: c.Name, State: c.State}
		if dt > 0 {
			p, _ := prev.Component(c.Name)
			if c.Items < p.Items || c.Bytes < p.Bytes || c.Txns < p.Txns ||
				c.BusySeconds < p.BusySeconds || c.IdleSeconds < p.IdleSeconds ||
				c.WaitingSeconds < p.WaitingSeconds {
				p = ComponentSnapshot{}
			}
			r.Seconds = dt
			r.ItemsPerSec = float64(c.Items-p.Items) / dt
			r.BytesPerSec = float64(c.Bytes-p.Bytes) / dt
			r.TxnsPerSec = float64(c.Txns-p.Txns) / dt
			r.Busy = fraction(c.BusySeconds-p.BusySeconds, dt)
			r.Idle = fraction(c.IdleSeconds-p.IdleSeconds, dt)
			r.Waiting = fraction(c.WaitingSeconds-p.WaitingSeconds, dt)
		}
		out = append(out, r)
	}
	return out
}

// fraction returns part/whole clamped to [0, 1] (snapshots are not a global
// cut, so a component's state time can exceed the registry interval by the
// time it takes to read the registry).
func fraction(part, whole float64) float64 {
	f := part / whole
	switch {
	case f < 0:
		return 0
	case f > 1:
		return 1
	}
	return f
}

// String renders the rate for a progress line, e.g.
// "capture 12.3k/s 4.5MB/s 120txn/s busy 75% idle 0% wait 25% (waiting)".
func (r Rate) String() string {
	b := make([]byte, 0, 96)
	b = append(b, r.Name...)
	b = append(b, ' ')
	b = appendHuman(b, r.ItemsPerSec, 1000, "")
	b = append(b, "/s "...)
	b = appendHuman(b, r.BytesPerSec, 1000, "B")
	b = append(b, "/s "...)
	b = appendHuman(b, r.TxnsPerSec, 1000, "")
	b = append(b, "txn/s busy "...)
	b = strconv.AppendInt(b, int64(math.Round(r.Busy*100)), 10)
	b = append(b, "% idle "...)
	b = strconv.AppendInt(b, int64(math.Round(r.Idle*100)), 10)
	b = append(b, "% wait "...)
	b = strconv.AppendInt(b, int64(math.Round(r.Waiting*100)), 10)
	b = append(b, "% ("...)
	b = append(b, r.State...)
	b = append(b, ')')
	return string(b)
}

// appendHuman appends v with an SI suffix (k, M, G, T) and 3 significant
// digits at most, then unit.
func appendHuman(b []byte, v, base float64, unit string) []byte {
	suffixes := [...]string{"", "k", "M", "G", "T"}
	i := 0
	for math.Abs(v) >= base && i < len(suffixes)-1 {
		v /= base
		i++
	}
	prec := 0
	switch a := math.Abs(v); {
	case i == 0 && a == math.Trunc(a):
		prec = 0
	case a < 10:
		prec = 1
	case a < 100 && i > 0:
		prec = 1
	}
	b = strconv.AppendFloat(b, v, 'f', prec, 64)
	b = append(b, suffixes[i]...)
	return append(b, unit...)
}
