package target

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/syncbuf"
)

// watchPipe adds one end of an in-memory pipe to w as a connection of
// backend pid and starts a Read on it that blocks until data or close;
// the returned channel gets its error.
func watchPipe(w *LinkWatch, pid uint32) (peer net.Conn, readErr chan error) {
	a, b := net.Pipe()
	wc := &watchedConn{Conn: a, w: w}
	wc.pid.Store(pid)
	wc.last.Store(w.now().UnixNano())
	w.mu.Lock()
	w.conns[wc] = struct{}{}
	w.mu.Unlock()
	readErr = make(chan error, 1)
	go func() {
		buf := make([]byte, 16)
		for {
			if _, err := wc.Read(buf); err != nil {
				readErr <- err
				return
			}
		}
	}()
	return b, readErr
}

func TestLinkWatch(t *testing.T) {
	const timeout = 30 * time.Second
	cases := []struct {
		name   string
		states map[uint32]backendState
		probe  error
		killed bool
		late   bool // killed only after a whole timeout
	}{
		{"backend waits for its client within a statement", map[uint32]backendState{7: {"active", "Client", "ClientRead", ""}}, nil, true, true},
		{"backend idle in transaction", map[uint32]backendState{7: {"idle in transaction", "Client", "ClientRead", ""}}, nil, true, false},
		{"backend gone", map[uint32]backendState{}, nil, true, false},
		{"server unreachable", nil, errors.New("connect: i/o timeout"), true, false},
		{"backend busy (long COPY, slow trigger)", map[uint32]backendState{7: {"active", "IO", "DataFileRead", ""}}, nil, false, false},
		{"backend busy on a lock", map[uint32]backendState{7: {"active", "Lock", "transactionid", ""}}, nil, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := NewLinkWatch("", timeout, nil, nil)
				probed := make(chan time.Time, 1) // when the first probe came
				w.probe = func(context.Context, []uint32) (map[uint32]backendState, error) {
					select {
					case probed <- time.Now():
					default:
					}
					return tc.states, tc.probe
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				start := time.Now()
				go func() { _ = w.Run(ctx); close(done) }()
				peer, readErr := watchPipe(w, 7)

				// Nothing is asked before half the timeout; the first
				// probe comes within a fifth of the timeout after.
				early, late := timeout/2-time.Second, timeout/2-time.Second+timeout/5
				select {
				case at := <-probed:
					if el := at.Sub(start); el <= early || el > late {
						t.Fatalf("first probe after %v, want within (%v, %v]", el, early, late)
					}
				case <-time.After(2 * timeout):
					t.Fatal("a call blocked past the timeout was never looked at")
				}
				// A late close comes after a whole timeout of silence, within
				// another half timeout; the others with the probe.
				closeBy := late
				if tc.late {
					early, closeBy = late, late+timeout/2
				}
				select {
				case err := <-readErr:
					if !tc.killed {
						t.Fatalf("closed a connection whose backend is working: %v", err)
					}
					if el := time.Since(start); (tc.late && el <= early) || el > closeBy {
						t.Fatalf("closed after %v, want within (%v, %v]: %v", el, early, closeBy, err)
					}
					if !errors.Is(err, pgerr.ErrSilentLink) {
						t.Fatalf("the blocked call failed with %v, want ErrSilentLink in its chain", err)
					}
					synctest.Wait() // the watcher counts after the close
					if w.closed.Load() != 1 {
						t.Fatalf("closed counter %d", w.closed.Load())
					}
				case <-time.After(2 * timeout):
					if tc.killed {
						t.Fatal("a silent link was not closed")
					}
				}
				peer.Close()
				cancel()
				<-done
			})
		})
	}
}

// TestLinkWatchIdleAndMoving: a connection with no call blocked (idle, or
// the engine busy on its own side) is never suspect, however long; nor is
// one whose bytes keep moving.
func TestLinkWatchIdleAndMoving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 30 * time.Second
		w := NewLinkWatch("", timeout, nil, nil)
		w.probe = func(context.Context, []uint32) (map[uint32]backendState, error) {
			t.Error("probed a connection that is not silent")
			return nil, nil
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { _ = w.Run(ctx); close(done) }()

		a, b := net.Pipe()
		idle := &watchedConn{Conn: a, w: w}
		idle.pid.Store(1)
		w.mu.Lock()
		w.conns[idle] = struct{}{}
		w.mu.Unlock()

		peer, readErr := watchPipe(w, 2)
		writer := make(chan struct{})
		go func() { // a byte every 10 s: slow, but moving
			defer close(writer)
			tick := time.NewTicker(10 * time.Second)
			defer tick.Stop()
			for range 15 {
				<-tick.C
				if _, err := peer.Write([]byte{1}); err != nil {
					return
				}
			}
		}()
		<-writer
		select {
		case err := <-readErr:
			t.Fatalf("a moving connection was closed: %v", err)
		case <-time.After(timeout / 4):
		}
		if err := idle.Close(); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		n := len(w.conns)
		w.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d connections watched after one closed, want 1", n)
		}
		b.Close()
		peer.Close()
		cancel()
		<-done
	})
}

// TestLinkWatchSaysWhoHoldsALock: a backend waiting for a lock is working,
// not dead (its connection stays open), but the watch says which sessions
// hold it up, when it first looks and again every lockWaitEvery, not at
// every look.
func TestLinkWatchSaysWhoHoldsALock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 30 * time.Second
		var logs syncbuf.Buffer
		w := NewLinkWatch("", timeout, nil, slog.New(slog.NewTextHandler(&logs, nil)))
		const who = "pid 99 (role app, application psql, idle in transaction, its transaction open for 40 s): UPDATE t SET v = 1"
		w.probe = func(context.Context, []uint32) (map[uint32]backendState, error) {
			return map[uint32]backendState{7: {"active", "Lock", "transactionid", who}}, nil
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { _ = w.Run(ctx); close(done) }()
		peer, readErr := watchPipe(w, 7)

		said := func() int { return strings.Count(logs.String(), "held_by=\"pid 99 (role app") }
		start := time.Now()
		at := func(d time.Duration) { // sleeps until d after the start
			time.Sleep(d - time.Since(start))
			synctest.Wait()
		}
		// The first look comes at half the timeout (15 s), the next every
		// tenth of it (3 s); lockWaitEvery is 30 s.
		at(timeout/2 + timeout/5)
		if n := said(); n != 1 {
			t.Errorf("said who holds the lock %d times after the first look, want 1:\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), "waiting_pid=7") || !strings.Contains(logs.String(), "wait_event=transactionid") {
			t.Errorf("the warning lacks the waiting backend:\n%s", logs.String())
		}
		at(timeout/2 + lockWaitEvery - timeout/5)
		if n := said(); n != 1 {
			t.Errorf("said it %d times before lockWaitEvery passed, want 1", n)
		}
		at(timeout/2 + lockWaitEvery + timeout/5)
		if n := said(); n != 2 {
			t.Errorf("said it %d times after lockWaitEvery, want 2", n)
		}
		select {
		case err := <-readErr:
			t.Errorf("closed a connection whose backend waits for a lock: %v", err)
		default:
		}
		peer.Close()
		cancel()
		<-done
	})
}
