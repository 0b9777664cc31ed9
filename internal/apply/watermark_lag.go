package apply

import "time"

// OldestUnapplied returns the source commit time of the oldest registered
// transaction that is not yet committed on the target (not Visible): now
// minus it is the apply lag. ok is false when every registered transaction
// is visible, or the oldest was registered without a commit time.
func (w *Watermark) OldestUnapplied() (at time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := max(w.vhead, w.head)
	if i >= len(w.pending) || w.pending[i].commit == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, w.pending[i].commit), true
}
