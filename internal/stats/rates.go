package stats

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

// Rates returns, for every component of cur (in cur's order), its throughput
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
