package capture

import (
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

// readState is the coalescing reader's hook: capture is Idle while it waits
// for the socket (and naps before a read), Busy otherwise — decoding,
// queueing, sending status. Flow control sets it Waiting (the queue, through
// queue.Options.Producer, and blocking). Two state changes a socket read,
// not per message.
func (c *Capture) readState(reading bool) {
	if reading {
		c.stats.SetState(stats.Idle)
	} else {
		c.stats.SetState(stats.Busy)
	}
}

// commitTimeAcker is an Acker that also keeps the source commit time of the
// transactions it registers (apply.Watermark: the apply lag is now minus
// the commit time of the oldest one not yet applied).
type commitTimeAcker interface {
	RegisterCommit(end change.LSN, commit time.Time)
}

// register registers a committed transaction with the acker, with its
// commit time when the acker keeps it.
func (c *Capture) register(info change.TxnInfo) {
	if a, ok := c.opts.Acker.(commitTimeAcker); ok {
		a.RegisterCommit(info.EndLSN, info.CommitTime)
		return
	}
	c.opts.Acker.Register(info.EndLSN)
}
