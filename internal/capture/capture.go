package capture

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/pgoutput"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/stats"
)

// ErrCaughtUp is returned by Run when Options.StopAt is set and the slot has
// been acknowledged at or past it.
var ErrCaughtUp = errors.New("caught up")

// Queue is what capture feeds: the transaction queue (internal/queue).
type Queue interface {
	Begin(xid uint32)
	Add(ctx context.Context, xid uint32, c *change.Change) error
	Commit(info change.TxnInfo) error
	Abort(xid, subxid uint32) error
}

// Eager applies large streamed transactions while they are in progress
// (apply.Eager). Every call is safe to retry after a ctx deadline: it either
// happened or did not.
type Eager interface {
	TryTake(ctx context.Context, xid uint32, processed, waitFor change.LSN) (bool, error)
	Chunk(ctx context.Context, xid uint32, waitFor change.LSN) error
	Add(ctx context.Context, xid uint32, c *change.Change) error
	Abort(ctx context.Context, xid, subxid uint32) error
}

// RawSink takes the slot's messages undecoded (Options.Raw). Message gets
// one pgoutput message (data: as received, valid only during the call; m:
// its pgoutput.ParseHead: a row change's tuples are not decoded). A Message that returns a context deadline error must have
// done nothing: capture sends the slot its status and calls it again.
// Err reports a failure found after a Message returned (a write the sink
// could not complete); capture checks it between messages.
type RawSink interface {
	Message(ctx context.Context, walStart change.LSN, data []byte, m *pgoutput.Message) error
	Err() error
}

// Acker is the progress capture reports to and acknowledges from (apply.Watermark).
type Acker interface {
	Register(end change.LSN)
	Observe(walEnd change.LSN)
	Flush() change.LSN
	Pending() int
}

// Options configure a Capture.
type Options struct {
	DSN         string // the source, as given by the user (a replication=database connection is derived)
	Slot        string
	Publication string

	// StartLSN is where streaming starts (the server starts at the later of it
	// and the slot's confirmed position). InitialFlush is what is acknowledged
	// before anything is applied: the slot's confirmed position or StartLSN.
	StartLSN     change.LSN
	InitialFlush change.LSN

	ProtoVersion    int           // 0: the highest the server speaks
	Binary          bool          // ask for values in binary (protocol 2+, PostgreSQL 14+)
	DecodingWorkMem string        // logical_decoding_work_mem of the walsender session ("" = server default)
	StatusInterval  time.Duration // standby status updates at least this often (default 10s)
	StopAt          change.LSN    // if set, Run returns ErrCaughtUp once acknowledged at or past it
	// Timeout detects a silent link (open, but nothing arrives): after a
	// third of it without data, a status update asks the server to answer;
	// if nothing arrives in the two thirds after that, Run fails with
	// pgerr.ErrSilentLink. A walsender answers such a request even while it
	// decodes a long transaction or has nothing to send, so long work and an
	// idle source never trip it. 0 turns it off.
	Timeout time.Duration
	// DDLMessages asks pgoutput for logical messages (PostgreSQL 14+) and
	// turns the transactional repstream.ddl messages of tables the
	// publication publishes into change.OpDDL changes (ddl.go).
	DDLMessages bool
	// DDLKey checks that each repstream.ddl message was emitted by
	// repstream's trigger (ddlmsg.Verify; any role may emit one): one that
	// does not verify is ignored, with a warning. Before DDLSignedFrom a
	// message without a signature is taken as it is: an earlier version's
	// trigger emitted it. Needed with DDLMessages.
	DDLKey        []byte
	DDLSignedFrom change.LSN
	// DDLKeyNow reads the key as the source has it now, and a WAL
	// position the source had passed before it read it: a signed message
	// that does not verify stops the run when the key changed (nil: not
	// looked at). A message before that position that does not verify is
	// not looked up again (ddlContent).
	DDLKeyNow func(ctx context.Context) (key []byte, before change.LSN, err error)
	// DDLFromTopic: the messages are read from a copy of the slot's
	// stream that only the capture writes (a Kafka topic: NewDecoder),
	// which keeps every message that does not verify out of it. One
	// there was written by someone else: it is an error (wrapping
	// ddlmsg.ErrNotSigned), not ignored.
	DDLFromTopic bool
	// DDLKeySince: a WAL position the source had passed after DDLKey was
	// read. A change of the key commits after every message signed with
	// the key before it, so a message at or after DDLKeySince that does
	// not verify was not signed with an earlier key either (with
	// DDLFromTopic: what its error says).
	DDLKeySince change.LSN
	// TopicKey (with Raw: capture --kafka) signs anew, with Ed25519, each
	// schema-change message the capture checked before the raw sink gets
	// it (ddlmsg.SignTopic, in place of the HMAC signature): the applies
	// check the topic's messages with the public key, which signs nothing
	// (TopicKeys). Needed with Raw and DDLMessages.
	TopicKey ed25519.PrivateKey
	// TopicKeys (with DDLFromTopic) are the public keys, by fingerprint,
	// that check the messages the captures signed for the topic
	// (ddlmsg.VerifyTopic); TopicKeysNow reads them again from the source
	// for a message signed with a key not among them (a capture started
	// since with a new key). Messages in the HMAC form (a capture of a
	// version from before Ed25519 wrote them) are checked with DDLKey, if
	// the apply could read it, else are an error (notFromCapture).
	TopicKeys    map[string]ed25519.PublicKey
	TopicKeysNow func(ctx context.Context) (map[string]ed25519.PublicKey, error)
	// SkipOrigins (--origin none) leaves out the transactions that carry
	// a replication origin (a replication's writes into the source):
	// pgoutput's origin option on PostgreSQL 16+, originFilter before.
	SkipOrigins bool
	// GatherWait: while transactions come less than this apart, a read
	// that has caught up with the stream waits up to this long for more
	// before it wakes (lowat.go); 0: never.
	GatherWait time.Duration

	Queue Queue
	// Raw, if set, takes the slot's messages as they arrive instead of
	// Queue (capture --kafka: package kafkalog writes them to a topic):
	// capture still tracks transactions, registers each commit with the
	// Acker before Raw sees it, and acknowledges what the Acker says.
	Raw RawSink
	// Started, if set, is called once the slot is held (START_REPLICATION
	// succeeded), before the first message is read: capture --kafka
	// writes its epoch marker there, when no other capture can write.
	Started func(ctx context.Context) error
	Acker   Acker
	Eager   Eager // optional
	// LastCommit is the end LSN of the last transaction committed before
	// the first message (NewDecoder: an earlier capture session's in the
	// topic, which the target may not have yet): a transaction Eager
	// takes waits until apply has made it visible, as it waits for the
	// transactions committed before it in its own session.
	LastCommit change.LSN
	Stats      *stats.Registry
	Logger     *slog.Logger
}

// Capture is the receive loop. One goroutine (the one calling Run) owns the
// replication connection for its whole life: pgconn is not safe for
// concurrent use, so standby status updates are sent from the same loop —
// also while the queue holds capture back in flow control.
type Capture struct {
	opts  Options
	log   *slog.Logger
	stats *stats.Component
	conn  *pgconn.PgConn
	rd    *coalescingReader // under conn's read buffer; its read times are the loop's clock
	proto int

	// decode state, owned by the Run goroutine
	msg        pgoutput.Message
	rels       map[uint32]*change.Relation            // outside streams
	streamRels map[uint32]map[uint32]*change.Relation // per streamed top-level xid
	// streamRenames: per streamed top-level xid, the renames made in its
	// streamRels (renamed), in order, undone with the subtransaction that
	// made them (undoRenames).
	streamRenames map[uint32][]relRename
	inStream      bool
	streamXid     uint32
	txnXid        uint32 // open non-streamed transaction, valid while inTxn
	inTxn         bool
	openStream    map[uint32]bool // streamed transactions started and not yet committed/aborted
	queuedXid     map[uint32]bool // streamed transactions that go to the queue (not eager)
	eagerXid      uint32          // the streamed transaction applied eagerly, 0 if none
	lastCommit    change.LSN      // end LSN of the last transaction committed
	received      change.LSN      // highest WAL position received
	sentFlush     change.LSN
	lastStatus    time.Time
	pingAt        time.Time // when a status update asked the server to answer (zero: none outstanding)
	// asked counts the keepalives asking for a reply since askedSince
	// (stoppingSource).
	asked      int
	askedSince time.Time
	addCtx     context.Context // bounds the queue's flow-control waits; renewed every second
	addCancel  context.CancelFunc

	// major is the source's major version (0: not known, a Decoder).
	// redecode: the top-level transactions holding a partition's ATTACH
	// or DETACH on a PostgreSQL 14 source, after whose commit the session
	// ends with ErrRedecode (ddl.go).
	major    int
	redecode map[uint32]bool
	// origins leaves out the transactions with an origin on a source
	// without pgoutput's origin option (origin.go).
	origins originFilter

	cMessages, cChanges, cKeepalives, cFlowWaitNs, cReads *atomic.Int64
	cForgedDDL                                            *atomic.Int64                // repstream.ddl messages not signed by the trigger (ddl.go)
	keyKnownBefore                                        change.LSN                   // the source had DDLKey when its WAL had reached this far (ddl.go)
	topicKeys                                             map[string]ed25519.PublicKey // Options.TopicKeys, read again (ddl.go)
	gReceived, gFlushed                                   *atomic.Int64

	// For Behind (read by other goroutines): when the stream started, the
	// last keepalive came and the last socket read returned data (Unix
	// nanoseconds of the loop's clock; 0: not yet).
	startNano, keepaliveNano, dataNano atomic.Int64
	streamsOpen                        atomic.Int32  // len(openStream)
	gathers                            atomic.Bool   // the reader gathers a steady stream (Gathers)
	pid                                atomic.Uint32 // the walsender's PID (BackendPID)
}

// Catch-up detection (Behind).
const (
	behindAfter = 250 * time.Millisecond // data without a keepalive for this long: catching up
	behindQuiet = 100 * time.Millisecond // no data for this long: not streaming, so not behind
)

// Behind reports whether the source is far ahead of capture — a backlog being
// caught up — so that applying in larger groups costs no latency that
// matters. The walsender sends a keepalive whenever it has reached the end
// of the WAL and waits for more, and never while it reads older WAL as fast
// as it can (WalSndWaitForWal's fast path); so data that has kept coming for
// behindAfter without a keepalive means a backlog. False before the stream
// starts, when it is quiet, and while a large transaction streams in
// progress: eager apply of its chunks waits for the transactions that
// committed before them, which must not wait in a group meanwhile. Safe
// for concurrent use.
func (c *Capture) Behind() bool {
	data := c.dataNano.Load()
	if data == 0 || c.streamsOpen.Load() > 0 {
		return false
	}
	since := max(c.keepaliveNano.Load(), c.startNano.Load())
	now := time.Now().UnixNano()
	return data-since >= int64(behindAfter) && now-data < int64(behindQuiet)
}

// Gathers reports whether capture itself now waits for a slow steady
// stream's next transactions (Options.GatherWait, on a TCP connection:
// lowat.go), so that apply need not wait for them again. Safe for
// concurrent use.
func (c *Capture) Gathers() bool { return c.gathers.Load() }

// New validates options; Run connects.
func New(opts Options) (*Capture, error) {
	if opts.Queue == nil && opts.Raw == nil || opts.Acker == nil {
		return nil, errors.New("capture: a queue (or a raw sink) and an acker are required")
	}
	if opts.DDLMessages && len(opts.DDLKey) == 0 && !(opts.DDLFromTopic && (opts.TopicKeys != nil || opts.TopicKeysNow != nil)) {
		return nil, errors.New("capture: schema-change messages need the key that signs them")
	}
	if opts.DDLMessages && opts.Raw != nil && opts.TopicKey == nil {
		return nil, errors.New("capture: schema-change messages written to a topic need the key that signs them there")
	}
	if opts.StatusInterval <= 0 {
		opts.StatusInterval = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stats == nil {
		opts.Stats = stats.NewRegistry()
	}
	c := &Capture{
		opts:          opts,
		log:           opts.Logger.With("component", "capture"),
		stats:         opts.Stats.Component("capture"),
		rels:          map[uint32]*change.Relation{},
		streamRels:    map[uint32]map[uint32]*change.Relation{},
		streamRenames: map[uint32][]relRename{},
		openStream:    map[uint32]bool{},
		queuedXid:     map[uint32]bool{},
		redecode:      map[uint32]bool{},
		sentFlush:     opts.InitialFlush,
		lastCommit:    opts.LastCommit,
	}
	c.cMessages = c.stats.Counter("messages")
	c.cChanges = c.stats.Counter("changes")
	c.cKeepalives = c.stats.Counter("keepalives")
	c.cReads = c.stats.Counter("socket_reads")
	c.cFlowWaitNs = c.stats.Counter("flow_control_ns")
	c.cForgedDDL = c.stats.Counter("unsigned_ddl_messages")
	c.gReceived = c.stats.Gauge("received_lsn")
	c.gFlushed = c.stats.Gauge("flushed_lsn")
	return c, nil
}

// ReplicationConfig derives the replication connection's configuration from a
// user DSN: replication=database, a 1 MiB read buffer (the stream is read in
// large chunks, not one small message per syscall), the walsender
// session's logical_decoding_work_mem, and the value format of text values
// (pgdsn.SetValueFormat).
func ReplicationConfig(dsn, decodingWorkMem string) (*pgconn.Config, error) {
	cfg, err := pgdsn.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("source DSN: %w", err)
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "repstream"
	if decodingWorkMem != "" {
		cfg.RuntimeParams["logical_decoding_work_mem"] = decodingWorkMem
	}
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		if _, ok := r.(*coalescingReader); !ok {
			r = newCoalescingReader(r)
		}
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, 1<<20), w)
	}
	return cfg, nil
}

// Connect opens a replication connection to the source.
func Connect(ctx context.Context, dsn, decodingWorkMem string) (*pgconn.PgConn, error) {
	cfg, err := ReplicationConfig(dsn, decodingWorkMem)
	if err != nil {
		return nil, err
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection to source %s: %w", pgdsn.Describe(cfg), err)
	}
	return conn, nil
}

// ProtoVersionFor returns the highest pgoutput protocol a server speaks.
func ProtoVersionFor(serverMajor int) int {
	switch {
	case serverMajor >= 16:
		return 4
	case serverMajor >= 15:
		return 3
	case serverMajor >= 14:
		return 2
	}
	return 1
}

// ServerMajor parses the server_version parameter of a connection.
func ServerMajor(conn *pgconn.PgConn) int {
	v := conn.ParameterStatus("server_version")
	major, _, _ := strings.Cut(v, ".")
	n, _ := strconv.Atoi(strings.Fields(major + " ")[0])
	return n
}

// Run streams until ctx ends (returning ctx.Err()), an error, or — with
// StopAt — ErrCaughtUp.
func (c *Capture) Run(ctx context.Context) error {
	// After a crash the previous walsender can hold the slot until it notices
	// its client is gone: retry "slot is active" for a while.
	deadline := time.Now().Add(slotBusyWait)
	for {
		err := c.start(ctx)
		if err == nil || !pgerr.SlotInUse(err) || time.Now().After(deadline) {
			if err != nil {
				c.closeConn()
				return err
			}
			break
		}
		c.closeConn()
		c.log.Info("slot is still active (a previous session ending?): retrying", "slot", c.opts.Slot)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	defer c.closeConn()
	if c.opts.Started != nil {
		if err := c.opts.Started(ctx); err != nil {
			return err
		}
	}
	c.received = c.opts.StartLSN
	c.startNano.Store(time.Now().UnixNano())
	defer func() {
		if c.addCancel != nil {
			c.addCancel()
		}
	}()
	return c.loop(ctx)
}

// slotBusyWait is how long Run retries a slot held by another session.
const slotBusyWait = 15 * time.Second

// start connects and issues START_REPLICATION.
func (c *Capture) start(ctx context.Context) error {
	cfg, err := ReplicationConfig(c.opts.DSN, c.opts.DecodingWorkMem)
	if err != nil {
		return err
	}
	// Keep the connection's coalescing reader: its read times are the
	// loop's clock.
	build := cfg.BuildFrontend
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		c.rd = newCoalescingReader(r)
		c.rd.onRead = c.readState
		return build(c.rd, w)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replication connection to source %s: %w", pgdsn.Describe(cfg), err)
	}
	c.conn = conn
	c.pid.Store(conn.PID())
	c.proto = c.opts.ProtoVersion
	c.major = ServerMajor(conn)
	if c.proto == 0 {
		c.proto = ProtoVersionFor(c.major)
	}
	args := []string{
		fmt.Sprintf("proto_version '%d'", c.proto),
		fmt.Sprintf("publication_names '%s'", strings.ReplaceAll(quoteIdentList(c.opts.Publication), "'", "''")),
	}
	c.origins = originFilter{}
	switch {
	case c.opts.SkipOrigins && c.major >= 16:
		args = append(args, "origin 'none'")
	case c.opts.SkipOrigins:
		// Not streamed: a streamed transaction's origin is known only at
		// its commit (origin.go).
		c.origins.on = true
		c.log.Info("--origin none on PostgreSQL before 16: transactions with a replication origin are left out by capture, and transactions are read whole at their commit (not streamed while in progress)",
			"slot", c.opts.Slot, "server_major", c.major)
	}
	if c.proto >= 2 && !c.origins.on {
		args = append(args, "streaming 'true'")
	}
	if c.opts.Binary {
		if c.proto < 2 {
			return fmt.Errorf("binary transfer needs pgoutput protocol 2 (PostgreSQL 14) or later; the source speaks %d: run with --binary=false", c.proto)
		}
		args = append(args, "binary 'true'")
	}
	if c.opts.DDLMessages {
		if c.proto < 2 {
			return fmt.Errorf("schema-change messages need pgoutput protocol 2 (PostgreSQL 14) or later; the source speaks %d: run with --ddl=relation", c.proto)
		}
		args = append(args, "messages 'true'")
	}
	c.stats.SetInfo("slot", c.opts.Slot)
	c.stats.SetInfo("protocol", strconv.Itoa(c.proto))
	c.stats.SetInfo("format", map[bool]string{false: "text", true: "binary"}[c.opts.Binary])
	c.log.Info("starting replication", "slot", c.opts.Slot, "publication", c.opts.Publication,
		"start", c.opts.StartLSN, "protocol", c.proto, "binary", c.opts.Binary)
	err = pglogrepl.StartReplication(ctx, conn, c.opts.Slot, pglogrepl.LSN(c.opts.StartLSN),
		pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		return fmt.Errorf("start replication from slot %q at %s: %w", c.opts.Slot, c.opts.StartLSN, err)
	}
	return nil
}

func (c *Capture) closeConn() {
	if c.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.conn.Close(ctx)
	c.conn = nil
}

func quoteIdentList(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

func (c *Capture) loop(ctx context.Context) error {
	netConn := c.conn.Conn()
	c.useLowWater(netConn)
	forceStatus := true
	c.stats.SetState(stats.Idle)
	var deadline, nextCheck time.Time
	var reads uint64
	for {
		// Housekeeping at most every few milliseconds, not per message: the
		// stream can carry hundreds of thousands of messages a second. The
		// clock is the time of the last socket read (reading the clock per
		// message costs): messages from one read arrived together, and a
		// quiet stream reads, or times out, every 100 ms.
		if r := c.rd.reads.Load(); r != reads || forceStatus {
			c.cReads.Add(int64(r - reads))
			reads = r
			// Once per read, not per message: a read that carried only a
			// keepalive leaves no gap for Behind (keepaliveNano gets the
			// same clock).
			c.dataNano.Store(c.rd.lastNano.Load())
			now := c.clock()
			if forceStatus {
				now = time.Now()
			}
			if err := c.housekeep(ctx, now, forceStatus, &nextCheck, &deadline, netConn); err != nil {
				return err
			}
			forceStatus = false
		}
		msg, err := c.conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) {
				nextCheck = time.Time{}
				if err := c.checkSilence(time.Now()); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("receive from slot %q (last position %s): %w", c.opts.Slot, c.received, err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("parse keepalive: %w", err)
				}
				c.cKeepalives.Add(1)
				c.keepaliveNano.Store(c.clock().UnixNano())
				c.advanceReceived(change.LSN(ka.ServerWALEnd))
				// Between transactions, everything committed before the
				// walsender's position has been sent. A transaction still
				// being streamed commits after it, and is sent again in
				// full after a restart from a position past its start (the
				// slot's restart_lsn holds its WAL): so, as native's
				// worker does, it does not hold the acknowledgement back,
				// and a walsender shutting down (which waits for it) is
				// never held up by a large or prepared transaction
				// repstream has open.
				if !c.inTxn {
					c.opts.Acker.Observe(change.LSN(ka.ServerWALEnd))
				}
				if ka.ReplyRequested {
					forceStatus = true
					if err := c.stoppingSource(change.LSN(ka.ServerWALEnd)); err != nil {
						return err
					}
				}
			case pglogrepl.XLogDataByteID:
				if len(m.Data) < 25 {
					return fmt.Errorf("short XLogData message (%d bytes)", len(m.Data))
				}
				start := change.LSN(beUint64(m.Data[1:]))
				if err := c.handle(ctx, start, m.Data[25:]); err != nil {
					return err
				}
			}
			if lw := c.rd.lw; lw != nil {
				// 5: the CopyData header.
				var kind byte
				if m.Data[0] == pglogrepl.XLogDataByteID && len(m.Data) > 25 {
					kind = m.Data[25]
				}
				lw.handled(5+len(m.Data), kind == pgoutput.MsgBegin, kind == pgoutput.MsgCommit)
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("slot %q: %w", c.opts.Slot, pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return fmt.Errorf("slot %q: the server ended replication at %s", c.opts.Slot, c.received)
		}
	}
}

// housekeep checks cancellation, sends the status update when due, and
// keeps the socket's read deadline ahead; at most every 5 ms unless force.
func (c *Capture) housekeep(ctx context.Context, now time.Time, force bool, nextCheck, deadline *time.Time, netConn net.Conn) error {
	if !force && now.Before(*nextCheck) {
		return nil
	}
	*nextCheck = now.Add(5 * time.Millisecond)
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.opts.Raw != nil {
		if err := c.opts.Raw.Err(); err != nil {
			return err
		}
	}
	// While caught-up is awaited and nothing is pending, ask the
	// server for its position often, so we learn the WAL it has sent.
	wantReply := c.opts.StopAt != 0 && c.idle() && c.sentFlush < c.opts.StopAt && c.opts.Acker.Pending() == 0
	sinceStatus := now.Sub(c.lastStatus)
	if force || sinceStatus >= c.opts.StatusInterval ||
		sinceStatus >= 100*time.Millisecond && (wantReply || c.opts.Acker.Flush() > c.sentFlush) {
		if err := c.sendStatus(wantReply); err != nil {
			return err
		}
		if c.opts.StopAt != 0 && c.sentFlush >= c.opts.StopAt {
			c.log.Info("caught up", "flushed", c.sentFlush, "target", c.opts.StopAt)
			return ErrCaughtUp
		}
	}
	// Bound the wait so that status updates and cancellation are
	// timely; moving the socket deadline costs, so only when it nears.
	if deadline.Sub(now) < 50*time.Millisecond {
		*deadline = now.Add(100 * time.Millisecond)
		if err := c.setDeadline(netConn, *deadline); err != nil {
			return fmt.Errorf("set read deadline: %w", err)
		}
	}
	return nil
}

// stopAsks is how many keepalives asking for a reply within stopAsksIn
// mean a walsender shutting down: it asks again as soon as it has each
// answer, until the client confirms all it sent (a running one asks at
// most every wal_sender_timeout/2).
const (
	stopAsks   = 50
	stopAsksIn = time.Second
)

// stoppingSource counts a keepalive asking for a reply; when they come as
// a shutting-down walsender sends them and the confirmed position is
// behind walEnd (the target still applying what was sent), it returns
// pgerr.ErrSourceStopping: the connection is given up rather than hold
// the source's shutdown up for as long as the target takes (native's
// worker, busy applying, does not answer and is timed out).
func (c *Capture) stoppingSource(walEnd change.LSN) error {
	now := c.clock()
	if now.Sub(c.askedSince) > stopAsksIn {
		c.asked, c.askedSince = 0, now
	}
	c.asked++
	if c.asked < stopAsks || c.sentFlush >= walEnd {
		return nil
	}
	return fmt.Errorf("slot %q at %s: %w: its walsender asked for the confirmed position %d times within %s, and %s of %s is confirmed; the connection is closed so as not to hold the shutdown up, and what is not confirmed is streamed again after the restart",
		c.opts.Slot, c.received, pgerr.ErrSourceStopping, c.asked, stopAsksIn, c.sentFlush, walEnd)
}

// checkSilence runs when a read found nothing to read (Options.Timeout).
// A silent link — a NAT or firewall that dropped its state, a frozen
// network — shows no error: the socket stays open and nothing arrives. So
// after Timeout/3 without data capture asks the walsender to answer (a
// status update with reply requested, which it answers with a keepalive
// at once, whatever it is doing), and only if nothing at all arrives in
// the 2*Timeout/3 after that is the link declared dead. Time spent away
// from the socket (flow control) never counts: the question is asked
// first.
func (c *Capture) checkSilence(now time.Time) error {
	if c.opts.Timeout <= 0 {
		return nil
	}
	last := time.Unix(0, max(c.rd.lastDataNano.Load(), c.startNano.Load()))
	if c.pingAt.IsZero() || last.After(c.pingAt) {
		c.pingAt = time.Time{}
		if now.Sub(last) < c.opts.Timeout/3 {
			return nil
		}
		if err := c.sendStatus(true); err != nil {
			return err
		}
		c.pingAt = now
		return nil
	}
	if waited := now.Sub(c.pingAt); waited >= c.opts.Timeout*2/3 {
		return fmt.Errorf("slot %q at %s: %w: nothing from the source for %s, not even an answer to a status request sent %s ago",
			c.opts.Slot, c.received, pgerr.ErrSilentLink, now.Sub(last).Round(time.Second), waited.Round(time.Second))
	}
	return nil
}

// BackendPID is the source's walsender process serving this capture (0
// before Run connected). After a silent link it may live on, holding the
// slot, until wal_sender_timeout: the engine ends it before it reconnects.
func (c *Capture) BackendPID() uint32 { return c.pid.Load() }

// clock returns the time of the last socket read: a cheap, slightly stale
// clock (time.Now when nothing was read yet).
func (c *Capture) clock() time.Time {
	if c.rd == nil || c.rd.reads.Load() == 0 {
		return time.Now()
	}
	return time.Unix(0, c.rd.lastNano.Load())
}

func beUint64(b []byte) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

func (c *Capture) idle() bool { return !c.inTxn && len(c.openStream) == 0 }

func (c *Capture) advanceReceived(l change.LSN) {
	if l > c.received {
		c.received = l
		c.gReceived.Store(int64(l))
	}
}

// sendStatus acknowledges the durable low watermark. All three positions are
// set explicitly (pglogrepl would replace a zero flush with the write position,
// acknowledging what is not applied yet).
func (c *Capture) sendStatus(replyRequested bool) error {
	if c.conn == nil {
		return nil // a Decoder: no slot to report to
	}
	flush := c.opts.Acker.Flush()
	if flush < c.sentFlush {
		flush = c.sentFlush
	}
	write := max(c.received, flush)
	if flush == 0 {
		// Nothing known to be applied and no initial position: report nothing
		// rather than let zero stand for "everything received".
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), c.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(write),
		WALFlushPosition: pglogrepl.LSN(flush),
		WALApplyPosition: pglogrepl.LSN(flush),
		ClientTime:       time.Now(),
		ReplyRequested:   replyRequested,
	})
	if err != nil {
		return fmt.Errorf("send standby status to slot %q: %w", c.opts.Slot, err)
	}
	c.sentFlush = flush
	c.gFlushed.Store(int64(flush))
	c.lastStatus = time.Now()
	return nil
}

// handle decodes one XLogData payload. Row changes are copied out of the
// connection's buffer (which the next receive overwrites) before decoding, so
// the tuples a Change points at belong to it; a raw sink gets the buffer
// itself (valid only during its Message call, as RawSink says).
func (c *Capture) handle(ctx context.Context, walStart change.LSN, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	c.cMessages.Add(1)
	if c.opts.Raw == nil {
		switch data[0] {
		case pgoutput.MsgInsert, pgoutput.MsgUpdate, pgoutput.MsgDelete, pgoutput.MsgTruncate:
			data = append([]byte(nil), data...)
		}
	}
	m := &c.msg // one Message, reused for every message
	if c.opts.Raw != nil {
		// The raw sink passes the message on whole; its reader validates
		// the tuples when it decodes them.
		if err := pgoutput.ParseHead(data, c.inStream, c.proto, m); err != nil {
			return fmt.Errorf("decode message at %s: %w", walStart, err)
		}
		if c.origins.observe(m, c.inStream, c.streamXid) {
			return nil
		}
		return c.handleRaw(ctx, walStart, data, m)
	}
	if err := pgoutput.Parse(data, c.inStream, c.proto, m); err != nil {
		return fmt.Errorf("decode message at %s: %w", walStart, err)
	}
	if c.origins.observe(m, c.inStream, c.streamXid) {
		return nil
	}
	switch m.Type {
	case pgoutput.MsgBegin:
		c.inTxn, c.txnXid = true, m.Xid
		c.opts.Queue.Begin(m.Xid)
	case pgoutput.MsgCommit:
		info := change.TxnInfo{Xid: c.txnXid, CommitLSN: m.LSN, EndLSN: m.EndLSN, CommitTime: m.Time}
		if err := c.commit(info); err != nil {
			return err
		}
		c.inTxn = false
		return c.redecodeAfter(ctx, c.txnXid, m.EndLSN)
	case pgoutput.MsgStreamStart:
		return c.streamStart(ctx, m)
	case pgoutput.MsgStreamStop:
		c.inStream = false
	case pgoutput.MsgStreamCommit:
		return c.streamCommit(ctx, m)
	case pgoutput.MsgStreamAbort:
		return c.streamAbort(ctx, m)
	case pgoutput.MsgRelation:
		c.describe(m.Relation)
	case pgoutput.MsgInsert, pgoutput.MsgUpdate, pgoutput.MsgDelete:
		return c.rowChange(ctx, walStart, m)
	case pgoutput.MsgTruncate:
		return c.truncate(ctx, walStart, m)
	case pgoutput.MsgMessage:
		return c.message(ctx, walStart, m)
	}
	// Origin (see origins) and Type need no action: values travel as
	// text.
	return nil
}

// streamStart opens (or reopens) a chunk of streamed transaction m.Xid;
// the changes until StreamStop are its. A chunk of the transaction Eager
// applies waits until Eager may take it (after the last commit queued).
func (c *Capture) streamStart(ctx context.Context, m *pgoutput.Message) error {
	c.inStream, c.streamXid = true, m.Xid
	c.openStream[m.Xid] = true
	c.streamsOpen.Store(int32(len(c.openStream)))
	if m.Xid == c.eagerXid {
		waitFor := c.lastCommit
		return c.blocking(ctx, func(ctx context.Context) error { return c.opts.Eager.Chunk(ctx, m.Xid, waitFor) })
	}
	return nil
}

// streamCommit commits streamed transaction m.Xid, then forgets its
// stream, keeping the relations it described.
func (c *Capture) streamCommit(ctx context.Context, m *pgoutput.Message) error {
	info := change.TxnInfo{Xid: m.Xid, CommitLSN: m.LSN, EndLSN: m.EndLSN, CommitTime: m.Time, Streamed: true}
	if err := c.commit(info); err != nil {
		return err
	}
	// pgoutput counts a schema sent inside a committed stream as sent for
	// the transactions that follow (cleanup_rel_sync_cache sets
	// schema_sent on commit): it will not describe the relation again.
	for id, r := range c.streamRels[m.Xid] {
		c.rels[id] = r
	}
	c.forgetStream(m.Xid)
	if m.Xid == c.eagerXid {
		c.eagerXid = 0 // apply commits it at its position in commit order
	}
	return c.redecodeAfter(ctx, m.Xid, m.EndLSN)
}

// streamAbort aborts streamed transaction m.Xid, or its subtransaction
// m.SubXid, wherever its changes went (Eager or the queue); the stream is
// forgotten only with the whole transaction.
func (c *Capture) streamAbort(ctx context.Context, m *pgoutput.Message) error {
	whole := m.SubXid == 0 || m.SubXid == m.Xid
	if m.Xid == c.eagerXid {
		xid, sub := m.Xid, m.SubXid
		if err := c.blocking(ctx, func(ctx context.Context) error { return c.opts.Eager.Abort(ctx, xid, sub) }); err != nil {
			return fmt.Errorf("abort streamed transaction %d: %w", m.Xid, err)
		}
		if whole {
			c.eagerXid = 0
		}
	} else if err := c.opts.Queue.Abort(m.Xid, m.SubXid); err != nil {
		return fmt.Errorf("abort streamed transaction %d: %w", m.Xid, err)
	}
	if whole {
		c.forgetStream(m.Xid)
	} else {
		c.undoRenames(m.Xid, m.SubXid)
	}
	return nil
}

// forgetStream forgets streamed transaction xid, committed or aborted:
// open, its relations, where it was queued.
func (c *Capture) forgetStream(xid uint32) {
	delete(c.openStream, xid)
	c.streamsOpen.Store(int32(len(c.openStream)))
	delete(c.streamRels, xid)
	delete(c.streamRenames, xid)
	delete(c.queuedXid, xid)
	if c.redecode[xid] {
		delete(c.redecode, xid) // aborted (a commit ends the session)
	}
}

// describe records a Relation message: inside a stream, for that stream's
// transaction only (until it commits).
func (c *Capture) describe(r *change.Relation) {
	r.Binary = c.opts.Binary
	c.linkPrevious(r)
	if c.inStream {
		rs := c.streamRels[c.streamXid]
		if rs == nil {
			rs = map[uint32]*change.Relation{}
			c.streamRels[c.streamXid] = rs
		}
		rs[r.ID] = r
	} else {
		c.rels[r.ID] = r
	}
}

// rowChange adds an insert, update or delete; its tuples point into the
// message's data, handle's copy.
func (c *Capture) rowChange(ctx context.Context, walStart change.LSN, m *pgoutput.Message) error {
	rel, err := c.relation(m.RelID)
	if err != nil {
		return fmt.Errorf("%w (change at %s)", err, walStart)
	}
	if rel.Namespace == provision.Schema {
		return nil // repstream's own state (see truncate)
	}
	ch := change.Change{Op: change.Op(m.Type), LSN: walStart, Rel: rel, OldKind: m.OldKind, Old: m.Old, New: m.New}
	if c.inStream {
		ch.Xid = m.Xid
	}
	return c.add(ctx, &ch)
}

// truncate adds a truncate of the relations m names.
//
// Neither it nor rowChange queues a change of repstream's own tables on the
// source (schema repstream: the registry of replications), which a FOR ALL
// TABLES publication publishes with the rest: they are no replicated
// table's, and the target has its own.
func (c *Capture) truncate(ctx context.Context, walStart change.LSN, m *pgoutput.Message) error {
	ch := change.Change{Op: change.OpTruncate, LSN: walStart, TruncateOpts: m.TruncateOpts}
	if c.inStream {
		ch.Xid = m.Xid
	}
	for _, id := range m.TruncateRelIDs {
		rel, err := c.relation(id)
		if err != nil {
			return fmt.Errorf("%w (truncate at %s)", err, walStart)
		}
		if rel.Namespace != provision.Schema {
			ch.TruncateRels = append(ch.TruncateRels, rel)
		}
	}
	if len(ch.TruncateRels) == 0 {
		return nil
	}
	return c.add(ctx, &ch)
}

func (c *Capture) relation(id uint32) (*change.Relation, error) {
	if c.inStream {
		if r := c.streamRels[c.streamXid][id]; r != nil {
			return r, nil
		}
	}
	if r := c.rels[id]; r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("change for relation OID %d that was never described by a Relation message", id)
}

// add hands a change to the queue — or, for the streamed transaction applied
// eagerly, to Eager. A streamed transaction is offered to Eager at its first
// change.
func (c *Capture) add(ctx context.Context, ch *change.Change) error {
	top := c.txnXid
	if c.inStream {
		top = c.streamXid
	}
	c.cChanges.Add(1)
	c.stats.Add(1, int64(len(ch.Old)+len(ch.New)))
	if c.inStream && c.opts.Eager != nil {
		if top != c.eagerXid && c.eagerXid == 0 && !c.queuedXid[top] {
			// c.received: the walsender has processed the WAL up to here, so
			// this chunk belongs to a transaction that ends beyond it.
			taken, err := c.opts.Eager.TryTake(ctx, top, c.received, c.lastCommit)
			if err != nil {
				return err
			}
			if taken {
				c.eagerXid = top
			} else {
				c.queuedXid[top] = true
			}
		}
		if top == c.eagerXid {
			return c.blocking(ctx, func(ctx context.Context) error { return c.opts.Eager.Add(ctx, top, ch) })
		}
		// Once part of a streamed transaction is queued, all of it is: a
		// transaction is never split between the queue and Eager.
		c.queuedXid[top] = true
	}
	err := c.blocking(ctx, func(ctx context.Context) error { return c.opts.Queue.Add(ctx, top, ch) })
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("queue change of %s at %s: %w", relName(ch), ch.LSN, err)
	}
	return err
}

// blocking runs f, which may block in flow control, with a context that ends
// at least every second, so that the slot's status updates keep flowing while
// it waits; f is retried until it succeeds or fails otherwise.
func (c *Capture) blocking(ctx context.Context, f func(context.Context) error) error {
	for {
		if c.addCtx == nil || c.addCtx.Err() != nil {
			if c.addCancel != nil {
				c.addCancel()
			}
			c.addCtx, c.addCancel = context.WithTimeout(ctx, time.Second)
		}
		start := c.clock() // only used if f waits: no clock read per change
		err := f(c.addCtx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		c.stats.SetState(stats.Waiting)
		c.cFlowWaitNs.Add(int64(time.Since(start)))
		if time.Since(c.lastStatus) >= c.opts.StatusInterval/2 {
			if err := c.sendStatus(false); err != nil {
				return err
			}
		}
		c.stats.SetState(stats.Busy)
	}
}

func relName(ch *change.Change) string {
	if ch.Rel != nil {
		return ch.Rel.String()
	}
	if len(ch.TruncateRels) > 0 {
		return ch.TruncateRels[0].String()
	}
	return "?"
}

func (c *Capture) commit(info change.TxnInfo) error {
	c.advanceReceived(info.EndLSN)
	c.lastCommit = info.EndLSN
	c.register(info)
	c.stats.AddTxns(1)
	if err := c.opts.Queue.Commit(info); err != nil {
		return fmt.Errorf("queue commit of transaction %d (end %s): %w", info.Xid, info.EndLSN, err)
	}
	return nil
}

// handleRaw passes one parsed message to the raw sink (Options.Raw),
// keeping the transaction state the loop needs (in a transaction, the
// streams open, the last commit) and registering every commit with the
// Acker first.
func (c *Capture) handleRaw(ctx context.Context, walStart change.LSN, data []byte, m *pgoutput.Message) error {
	switch m.Type {
	case pgoutput.MsgBegin:
		c.inTxn, c.txnXid = true, m.Xid
	case pgoutput.MsgCommit:
		c.inTxn = false
		c.rawCommit(change.TxnInfo{Xid: c.txnXid, CommitLSN: m.LSN, EndLSN: m.EndLSN, CommitTime: m.Time})
	case pgoutput.MsgStreamStart:
		c.inStream, c.streamXid = true, m.Xid
		c.openStream[m.Xid] = true
		c.streamsOpen.Store(int32(len(c.openStream)))
	case pgoutput.MsgStreamStop:
		c.inStream = false
	case pgoutput.MsgStreamCommit:
		c.rawCommit(change.TxnInfo{Xid: m.Xid, CommitLSN: m.LSN, EndLSN: m.EndLSN, CommitTime: m.Time, Streamed: true})
		c.forgetStream(m.Xid)
	case pgoutput.MsgStreamAbort:
		if m.SubXid == 0 || m.SubXid == m.Xid {
			c.forgetStream(m.Xid)
		}
	case pgoutput.MsgInsert, pgoutput.MsgUpdate, pgoutput.MsgDelete, pgoutput.MsgTruncate:
		c.cChanges.Add(1)
		c.stats.Add(1, int64(len(data)))
	case pgoutput.MsgRelation:
		if err := c.binaryCarries(m.Relation); err != nil {
			return fmt.Errorf("relation at %s: %w", walStart, err)
		}
	case pgoutput.MsgMessage:
		if c.isDDL(m) {
			content, err := c.ddlContent(ctx, walStart, m)
			if content == nil {
				return err // not repstream's: it never reaches the topic
			}
			if msg, err := ddlmsg.Parse(content); err == nil {
				c.partitionChange(msg.Tag, m)
			}
			// Signed anew for the topic, whose readers cannot sign.
			signed := ddlmsg.SignTopic(c.opts.TopicKey, c.ddlXid(m), content)
			if data, err = pgoutput.WithContent(data, m, signed); err != nil {
				return fmt.Errorf("schema-change message at %s: %w", walStart, err)
			}
			m.Content = signed
		}
	}
	if err := c.blocking(ctx, func(ctx context.Context) error { return c.opts.Raw.Message(ctx, walStart, data, m) }); err != nil {
		return err
	}
	switch m.Type {
	case pgoutput.MsgCommit:
		return c.redecodeAfter(ctx, c.txnXid, m.EndLSN)
	case pgoutput.MsgStreamCommit:
		return c.redecodeAfter(ctx, m.Xid, m.EndLSN)
	}
	return nil
}

// ErrTextNeeded is returned by a raw session streaming binary values when a
// relation has a column of a type that is not built in (its binary format
// may embed the source's OIDs, which no target could read) or of a
// built-in type that travels as text (change.TextOnly: regclass, aclitem). The session
// ends before the raw sink has any of it; start again without Binary.
var ErrTextNeeded = errors.New("values must travel as text")

// binaryCarries checks, in a binary raw session, that r's values can
// travel in binary.
func (c *Capture) binaryCarries(r *change.Relation) error {
	if !c.opts.Binary {
		return nil
	}
	for _, col := range r.Columns {
		if col.TypeOID == 0 || col.TypeOID >= change.FirstNormalOID {
			return fmt.Errorf("%w: column %q of %s has type OID %d, not built in", ErrTextNeeded, col.Name, r.String(), col.TypeOID)
		}
		if why := change.TextOnly(col.TypeOID); why != "" {
			return fmt.Errorf("%w: column %q of %s: %s", ErrTextNeeded, col.Name, r.String(), why)
		}
	}
	return nil
}

func (c *Capture) rawCommit(info change.TxnInfo) {
	c.advanceReceived(info.EndLSN)
	c.lastCommit = info.EndLSN
	c.register(info)
	c.stats.AddTxns(1)
}

// Decoder turns a slot's messages read from elsewhere than the slot (a
// Kafka topic: package kafkalog) into the queue's transactions, exactly as
// Run does with the messages it receives: the same relations, schema
// changes, streamed transactions, commits registered with the Acker.
// Schema-change messages are checked as the capture checks them (the
// key, DDLSignedFrom, DDLKeyNow), bound to the same transaction ids, but
// one that does not verify is an error (Options.DDLFromTopic).
// Owned by one goroutine.
type Decoder struct{ c *Capture }

// NewDecoder returns a Decoder of messages of pgoutput protocol proto; opts'
// connection fields are not used.
func NewDecoder(opts Options, proto int) (*Decoder, error) {
	if opts.Queue == nil {
		return nil, errors.New("capture: a decoder needs a queue")
	}
	opts.Raw = nil
	opts.DDLFromTopic = true // checked again: who else may write there is not repstream's to say
	c, err := New(opts)
	if err != nil {
		return nil, err
	}
	c.proto = proto
	return &Decoder{c: c}, nil
}

// Message decodes one message, as the slot sent it at walStart: the
// source had decoded its WAL up to there (what Eager's TryTake is told).
func (d *Decoder) Message(ctx context.Context, walStart change.LSN, data []byte) error {
	d.c.advanceReceived(walStart)
	return d.c.handle(ctx, walStart, data)
}

// Streaming reports whether a streamed transaction is open (in progress):
// apply must not then wait to fill a group (Capture.Behind). Safe for
// concurrent use.
func (d *Decoder) Streaming() bool { return d.c.streamsOpen.Load() > 0 }

// Close releases what the decoder holds. The streamed transaction Eager
// applies, if one is open, is rolled back: the decoder's source sends it
// again from its start (a new capture session).
func (d *Decoder) Close() {
	if xid := d.c.eagerXid; xid != 0 && d.c.opts.Eager != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := d.c.opts.Eager.Abort(ctx, xid, 0); err != nil {
			d.c.log.Warn("roll back the transaction eager apply had open", "xid", xid, "err", err)
		}
		cancel()
		d.c.eagerXid = 0
	}
	if d.c.addCancel != nil {
		d.c.addCancel()
	}
}
