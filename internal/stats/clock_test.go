package stats

import (
	"sync"
	"time"
)

// fakeClock is a manually advanced clock for deterministic state accounting.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	tick time.Duration // added after every read when non-zero
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.tick)
	return t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
