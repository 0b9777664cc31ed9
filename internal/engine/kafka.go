package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"golang.org/x/sync/errgroup"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/probe"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// The two halves joined by a Kafka topic (config.RoleCapture,
// config.RoleApply): capture writes the slot's stream to the topic
// repstream.<slot> (package kafkalog) and acknowledges to the slot only
// what the brokers have; each apply reads the topic into its own queue
// and applies it as run does, recording in its target, with the rows, what
// it applied (the exactly-once record) and beside it the offset to read
// from again.

// KafkaCluster is the brokers of cfg.Kafka and how to reach them (the
// --kafka-* flags; the SASL password from $REPSTREAM_KAFKA_PASSWORD).
func KafkaCluster(cfg config.Config) (kafkalog.Cluster, error) {
	return kafkalog.NewCluster(cfg.Kafka, kafkalog.Security{TLS: cfg.KafkaTLS, CAFile: cfg.KafkaCA,
		CertFile: cfg.KafkaCert, KeyFile: cfg.KafkaKey, SASL: cfg.KafkaSASL, User: cfg.KafkaUser,
		Password: os.Getenv(kafkalog.EnvPassword)})
}

// runHalf runs the half the configuration's role names, riding through
// transient faults as runResilient does.
func (e *Engine) runHalf(ctx context.Context) error {
	kc, err := KafkaCluster(e.cfg)
	if err != nil {
		return err
	}
	if _, err := kafkalog.Compression(e.cfg.KafkaCompression); err != nil {
		return err // before anything is made
	}
	e.brokers = kc
	tuneRuntime(e.cfg)
	pctx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	go e.probeBrokers(pctx, kc)
	bo := reconnectBackoff(time.Second, e.cfg.ReconnectMaxWait)
	for attempt := 1; ; attempt++ {
		var err error
		if e.cfg.Role == config.RoleCapture {
			err = e.runCapture(ctx)
		} else {
			err = e.runApply(ctx)
		}
		if errors.Is(err, errRestartSession) && ctx.Err() == nil {
			continue // at once: nothing failed
		}
		if e.cfg.Role == config.RoleCapture && kafkalog.Fenced(err) && ctx.Err() == nil {
			// Another session took the slot (then the next one waits
			// for it and refuses), or the brokers aborted this one's
			// transaction (away longer than its timeout): a new
			// session, fencing and reading the topic's end again.
			if !e.waitToReconnect(ctx, bo, err, attempt, "the brokers refused this capture's producer: starting a new session") {
				return nil
			}
			continue
		}
		if ctx.Err() == nil && !e.reachedOnce && kafkaRetriable(err) {
			// Not reached once yet, but the brokers answered: with an
			// error they say passes (a partition without a leader right
			// after a broker's restart or the topic's creation), not a
			// wrong address. Brokers that do not answer at all still
			// stop this first start at once, below.
			if !e.waitToReconnect(ctx, bo, onKafkaSide(err), attempt, "the Kafka brokers answered with an error that passes: waiting, then starting again") {
				return nil
			}
			continue
		}
		if err == nil || ctx.Err() != nil || !e.reachedOnce || !transient(err) && !kafkaRetriable(err) {
			if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || pgerr.ConnectionLost(err)) {
				e.log.Info("stopped")
				return nil
			}
			return explainLocal(err, e.cfg.SpillDir)
		}
		if !e.waitToReconnect(ctx, bo, onKafkaSide(err), attempt, "connection lost: starting over from the recorded positions") {
			return nil
		}
	}
}

// errRestartSession ends a capture session that must start again at once,
// with what it learnt (e.captureText).
var errRestartSession = errors.New("the capture session starts again")

// runCapture is `repstream capture --kafka`: the publication, the event
// trigger and the slot as run makes them (no initial copy: each apply
// makes its own), the topic, then the slot's stream into the topic.
func (e *Engine) runCapture(ctx context.Context) (err error) {
	cfg := e.cfg
	e.start = time.Now()
	brokers := e.brokers
	topic := kafkalog.Topic(cfg.Slot)
	adm, admCl, err := kafkalog.NewAdmin(brokers)
	if err != nil {
		return err
	}
	defer admCl.Close()
	// Before anything is made: a capture that could not fence earlier
	// ones (Writer.Fence) must not hold the slot.
	if err := kafkalog.CheckTransactions(ctx, adm, topic, cfg.KafkaTxnTimeout); err != nil {
		return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
	}
	info, err := kafkalog.EnsureTopic(ctx, adm, topic)
	if err != nil {
		return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
	}
	e.log.Info("kafka topic", "topic", info.Name, "created", info.Created, "partitions", info.Partitions,
		"replication_factor", info.ReplicationFactor, "min_insync_replicas", info.MinInsyncReplicas,
		"cleanup_policy", info.CleanupPolicy, "max_message_bytes", info.MaxMessageBytes, "retention_ms", info.RetentionMs, "brokers", info.Brokers)
	if err := kafkalog.CheckTopicAccess(ctx, adm, topic, "capture", kafkalog.CaptureTopicOps); err != nil {
		if info.Created {
			e.dropTopic(ctx, adm, topic)
		}
		return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
	}

	// A first start (no slot yet: no capture of it can be running) starts
	// a producer with the transactional id before it makes anything, so
	// that ACLs missing on it stop it with nothing left behind. It also
	// refuses a topic that holds records already: a capture of a slot of
	// this name wrote them, and the slot was dropped since. What the
	// source wrote after that slot's last acknowledged position reached
	// no target, and a new slot, starting from now, would go on after
	// that gap in the same topic: every apply would read on without it.
	// So does a topic whose records retention has all removed: its
	// offsets go on.
	firstStartCheck := func(ctx context.Context) error {
		tail, err := kafkalog.Tail(ctx, adm, brokers, topic)
		if err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
		// Any record ever written, also one retention has removed since
		// (a target that read it would read on after the gap).
		if tail.End > 0 {
			held := fmt.Sprintf("offsets %d to %d, commits up to %s", tail.Start, tail.End-1, tail.LastCommit)
			if tail.Empty {
				held = fmt.Sprintf("offsets up to %d, removed since by retention", tail.End-1)
			}
			return fmt.Errorf("replication slot %q does not exist on the source, but a capture of it wrote to topic %s (%s): the slot was dropped since, and what the source wrote after its last acknowledged position reached no target; a new slot would go on after that gap. "+
				"To start this replication over, delete the topic (`repstream drop --kafka %s --slot %s --source ...`, or kafka-topics.sh --delete --topic %s), start this capture again, then re-seed each target (`repstream drop --target-only --slot %s`, then `repstream apply --truncate`)",
				cfg.Slot, topic, held, cfg.Kafka, cfg.Slot, topic, cfg.Slot)
		}
		if err := kafkalog.CheckTransactionalID(ctx, brokers, topic, cfg.KafkaTxnTimeout); err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
		return nil
	}
	// A topic another source's capture wrote (the same slot name on
	// another database or server): this one would skip its own
	// transactions below that stream's LSNs, and its records would reach
	// the other source's targets.
	sameSource := func(ctx context.Context, src kafkalog.Source) error {
		if err := kafkalog.CheckSource(ctx, adm, brokers, topic, "capture", src); err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
		return nil
	}
	slot, source, proto, err := e.provisionCapture(ctx, firstStartCheck, sameSource)
	if err != nil {
		return err
	}

	// Where to start: after what the topic holds. Read again once the
	// slot is held (Started): until then another capture may write.
	tail, err := kafkalog.Tail(ctx, adm, brokers, topic)
	if err != nil {
		return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
	}
	start := max(slot.Confirmed, tail.LastCommit)
	codec, err := kafkalog.Compression(cfg.KafkaCompression)
	if err != nil {
		return err
	}
	prod, err := kafkalog.NewProducer(brokers, topic, cfg.KafkaTxnTimeout, codec)
	if err != nil {
		return err
	}
	wm := apply.NewWatermark(slot.Confirmed)
	wm.TraceLatency(e.stats.CommitLatency(), "", stats.StageAcked) // Done: the brokers hold it
	w := kafkalog.NewWriter(kafkalog.WriterOptions{Client: prod, Topic: topic, Proto: uint8(proto), Binary: e.binary,
		CommitEvery: kafkalog.CommitInterval(cfg.KafkaTxnTimeout), Linger: cfg.KafkaLinger,
		LastCommit: tail.LastCommit, Acked: wm.Done, Logger: e.log, Stats: e.stats.Component("kafka")})
	defer func() {
		w.Close() // the record being filled, flushed and committed (up to 5 s)
		prod.Close()
	}()
	started := func(ctx context.Context) error {
		// Fence first: a capture frozen while this one took the slot
		// can write nothing after the tail read next.
		if err := w.Fence(ctx); err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
		held, err := kafkalog.Tail(ctx, adm, brokers, topic)
		if err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
		ep := kafkalog.Epoch{Start: start, SystemID: source.SystemID, DatabaseOID: source.DatabaseOID, Database: source.Database, Slot: cfg.Slot,
			Publication: cfg.Publication, DDLMessages: e.ddl == ddlTrigger}
		if err := w.Start(ctx, held, ep); err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
		e.log.Info("capture session started: the slot is held, its epoch marker written", "topic", topic,
			"slot_confirmed", slot.Confirmed, "topic_last_commit", held.LastCommit, "start", start)
		return nil
	}
	capt, err := capture.New(capture.Options{
		DSN: cfg.Source, Slot: cfg.Slot, Publication: cfg.Publication,
		StartLSN: start, InitialFlush: slot.Confirmed, ProtoVersion: proto, Binary: e.binary,
		DecodingWorkMem: cfg.DecodingWorkMem, StatusInterval: cfg.StatusInterval, Timeout: cfg.SourceTimeout, SkipOrigins: cfg.Origin == config.OriginNone,
		DDLMessages: e.ddl == ddlTrigger, DDLKey: e.ddlKey, DDLSignedFrom: e.ddlSignedFrom, DDLKeyNow: ddlKeyNow(cfg.Source, cfg.Slot), TopicKey: e.topicKey, Raw: w, Started: started, Acker: wm, Stats: e.stats, Logger: e.log,
	})
	if err != nil {
		return err
	}
	e.wm = wm
	e.watchWatermark(wm)
	e.setPhase("streaming")
	// The source's WAL position: far ahead of the stream (a backlog),
	// records are made larger and fewer.
	wctx, stopWAL := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { probe.WALLoop(wctx, cfg.Source, w.SourceWAL) })
	defer wg.Wait()
	defer stopWAL()
	err = capt.Run(ctx)
	e.walsenderPID = capt.BackendPID()
	if errors.Is(err, capture.ErrRedecode) {
		return errRestartSession // its commit is in the topic
	}
	if errors.Is(err, capture.ErrTextNeeded) {
		// A relation this session cannot carry in binary (a schema
		// change, a table added): the next session streams text, from
		// what the topic holds; its records say so.
		e.captureText = err.Error()
		e.log.Warn("a column's type is not built in: starting the capture session again with values in text", "reason", err)
		return errRestartSession
	}
	if kafkalog.Fenced(err) {
		return onSide("kafka", err)
	}
	return onSide("source", pgerr.ReplicationPrivilege(install.DSNUser(cfg.Source)).Explain(err))
}

// dropTopic deletes the topic this start made before it found it could
// not use it; a failure is logged (the topic is empty).
func (e *Engine) dropTopic(ctx context.Context, adm *kadm.Client, topic string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	rs, err := adm.DeleteTopics(dctx, topic)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		e.log.Warn("the failed start could not remove what it made", "what", "topic "+topic, "err", err)
		return
	}
	e.log.Info("the failed start removed what it made", "what", "topic "+topic)
}

// provisionCapture checks the source and makes what the capture needs as
// run makes it (the publication, the event trigger, the slot: a first
// start that fails before its slot exists leaves nothing behind), and
// returns the slot, the source's system identifier and database, and the
// pgoutput protocol it speaks. sourceCheck is given the identifier and
// the database before anything is made; on a first start (no slot yet),
// so is firstCheck.
func (e *Engine) provisionCapture(ctx context.Context, firstCheck func(context.Context) error, sourceCheck func(context.Context, kafkalog.Source) error) (slot install.Slot, source kafkalog.Source, proto int, err error) {
	cfg := e.cfg
	src, err := install.ConnectSource(ctx, cfg.Source)
	if err != nil {
		return slot, source, 0, err
	}
	defer src.Close(context.Background())
	if err := install.CheckSource(ctx, src); err != nil {
		return slot, source, 0, err
	}
	if err := install.CheckReplicationAttribute(ctx, src, cfg.Source); err != nil {
		return slot, source, 0, err
	}
	var version int
	if err := src.QueryRow(ctx, `SELECT s.system_identifier::text, current_setting('server_version_num')::int, d.oid, d.datname::text
FROM pg_catalog.pg_control_system() s, pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`).Scan(&source.SystemID, &version, &source.DatabaseOID, &source.Database); err != nil {
		return slot, source, 0, fmt.Errorf("read the source's identity: %w", err)
	}
	e.reachedOnce = true // from here on, brokers or a source away are waited for
	if err := sourceCheck(ctx, source); err != nil {
		return slot, source, 0, err
	}
	// Another capture streaming from the slot makes it active (so does, for
	// a moment, the walsender of one that just died): refuse, not retry.
	if err := install.WaitSlotInactive(ctx, src, cfg.Slot, 10*time.Second, e.log); err != nil {
		return slot, source, 0, err
	}
	firstStart, err := install.SlotMissing(ctx, src, cfg.Slot)
	if err != nil {
		return slot, source, 0, err
	}
	if firstStart {
		if err := firstCheck(ctx); err != nil {
			return slot, source, 0, err
		}
	}
	var undo install.Undo
	e.slotCreated = false
	defer func() {
		if err != nil && firstStart && !e.slotCreated {
			undo.Run(ctx, e.log)
		}
	}()
	createdPub, err := install.EnsurePublication(ctx, src, cfg.Publication, cfg.Tables, cfg.DDL == "true", e.log)
	if err != nil {
		return slot, source, 0, err
	}
	if createdPub {
		undo.Publication(src, cfg.Publication)
	} else if len(cfg.Tables) > 0 {
		if err := install.WidenCapturePublication(ctx, src, cfg.Publication, cfg.Tables, e.log); err != nil {
			return slot, source, 0, err
		}
	}
	tables, err := e.publishedTables(ctx, src, &undo, nil)
	if err != nil {
		return slot, source, 0, err
	}
	if e.ddl == ddlTrigger {
		if err := e.publishTopicKey(ctx, src); err != nil {
			return slot, source, 0, err
		}
	}
	slot, err = install.LookupSlot(ctx, src, cfg.Slot)
	if err != nil {
		return slot, source, 0, err
	}
	if !slot.Exists {
		res, closeSlot, err := install.CreateSlot(ctx, cfg.Source, cfg.Slot, false)
		if err != nil {
			return slot, source, 0, err
		}
		closeSlot()
		e.slotCreated = true
		if slot.Confirmed, err = change.ParseLSN(res.ConsistentPoint); err != nil {
			return slot, source, 0, err
		}
		e.log.Info("replication slot created", "slot", cfg.Slot, "consistent_point", slot.Confirmed)
	} else if slot.WALStatus == "lost" {
		return slot, source, 0, fmt.Errorf("replication slot %q is invalidated (wal_status lost): the WAL it needed is gone; run `repstream drop --kafka %s --slot %s --source ...` (the slot, the publication if repstream made it, the topic) and start this capture again, then re-seed each target (`repstream drop --target-only --slot %s`, then `repstream apply --truncate`)",
			cfg.Slot, cfg.Kafka, cfg.Slot, cfg.Slot)
	}
	proto = capture.ProtoVersionFor(version / 10000)
	if err := e.chooseCaptureBinary(ctx, src, tables, proto); err != nil {
		return slot, source, 0, err
	}
	return slot, source, proto, nil
}

// identifySystem reads the system identifier of the server dsn reaches
// with the replication protocol's IDENTIFY_SYSTEM.
func identifySystem(ctx context.Context, dsn string) (string, error) {
	repl, err := capture.Connect(ctx, dsn, "")
	if err != nil {
		return "", err
	}
	defer repl.Close(context.WithoutCancel(ctx))
	id, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return "", fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	return id.SystemID, nil
}

// srcSource is the apply's source as the topic's epoch markers name it.
func (e *Engine) srcSource() kafkalog.Source {
	return kafkalog.Source{SystemID: e.srcID.SystemID, DatabaseOID: e.srcID.DatabaseOID, Database: e.srcID.Database}
}

// chooseCaptureBinary decides whether this capture session streams values
// in binary (e.binary): --binary (the default), a source that can
// (PostgreSQL 14, protocol 2), every published column of a built-in type,
// and no session of this process found one that is not (e.captureText).
// Each apply checks its own target's column types against them.
func (e *Engine) chooseCaptureBinary(ctx context.Context, src *pgx.Conn, tables []schema.TableName, proto int) error {
	e.binary = false
	switch {
	case !e.cfg.Binary:
		return nil
	case proto < 2:
		e.log.Info("values travel as text, not binary", "reason", "the source's pgoutput protocol is 1 (PostgreSQL 13 or older)")
		return nil
	case e.captureText != "":
		e.log.Info("values travel as text, not binary", "reason", e.captureText)
		return nil
	}
	why, err := install.SourceBinaryProblem(ctx, src, tables)
	if err != nil {
		return err
	}
	if why != "" {
		e.log.Info("values travel as text, not binary", "reason", why)
		return nil
	}
	e.binary = true
	return nil
}

// topicFormat reads whether the topic's last record has binary values;
// a topic still empty (a capture starting writes its epoch marker once
// it holds the slot) is read again for up to markerWait, a passing error
// of the brokers waited out (kafkaRetry). Not known: false.
func (e *Engine) topicFormat(ctx context.Context, adm *kadm.Client, brokers kafkalog.Cluster, topic string) bool {
	for waited := time.Duration(0); ; waited += 200 * time.Millisecond {
		var tail kafkalog.TailInfo
		err := e.kafkaRetry(ctx, "the last record of topic "+topic, func() (err error) {
			tail, err = kafkalog.Tail(ctx, adm, brokers, topic)
			return err
		})
		if err != nil {
			e.log.Debug("the topic's last record not read: its values' format is not known yet", "err", err)
			return false
		}
		if !tail.Empty || waited >= markerWait {
			return tail.Binary
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// markerWait is how long an apply waits at start for a first record in
// an empty topic (topicFormat).
const markerWait = 10 * time.Second

// topicWait is how long an apply waits for its topic at start.
const topicWait = 30 * time.Second

// pgDatabase is the database a DSN names ("" if it cannot be read).
func pgDatabase(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return cfg.Database
}

// runApply is `repstream apply --kafka`: the target's tables as run makes
// them, an initial copy of its own (every table at a snapshot of a
// temporary slot: the transactions of the topic after it apply on top),
// then the topic into the target.
func (e *Engine) runApply(ctx context.Context) (err error) {
	cfg := e.cfg
	e.start = time.Now()
	brokers := e.brokers
	topic := kafkalog.Topic(cfg.Slot)
	adm, admCl, err := kafkalog.NewAdmin(brokers)
	if err != nil {
		return err
	}
	defer admCl.Close()
	// A capture started at the same moment makes the topic within seconds.
	topicStart, _, err := kafkalog.Offsets(ctx, adm, topic)
	for waited := time.Duration(0); errors.Is(err, kafkalog.ErrNoTopic) && waited < topicWait; waited += time.Second {
		if waited == 0 {
			e.log.Info("waiting for the topic: is `repstream capture` starting?", "topic", topic, "up_to", topicWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		topicStart, _, err = kafkalog.Offsets(ctx, adm, topic)
	}
	if errors.Is(err, kafkalog.ErrNoTopic) {
		return fmt.Errorf("kafka %s: topic %s does not exist: start `repstream capture --slot %s --kafka %s` on the source first", cfg.Kafka, topic, cfg.Slot, cfg.Kafka)
	}
	if err == nil {
		err = kafkalog.CheckTopicAccess(ctx, adm, topic, "apply", kafkalog.ApplyTopicOps)
	}
	if err != nil {
		return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
	}

	src, tgt, err := e.connectChecked(ctx)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	defer tgt.Close(context.Background())
	// A topic of another source than --source: the copy would be of one
	// database and the stream of the other.
	if e.srcID, err = provision.Identify(ctx, src); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if e.srcID.SystemID == "" {
		// A role that may not call pg_control_system(): without the
		// system identifier, another server's database of the same name
		// and OID (the first one made on a server has OID 16384) would
		// pass for the capture's. IDENTIFY_SYSTEM tells it on a
		// replication connection, which the copy needs anyway.
		sysid, ierr := identifySystem(ctx, cfg.Source)
		if ierr != nil {
			e.log.Warn("cannot read the source's system identifier: the topic's source is checked by database OID and name alone", "err", ierr)
		}
		e.srcID.SystemID = sysid
	}
	// And of another publication than --publication.
	if ep, err := kafkalog.LastEpoch(ctx, adm, brokers, topic); err != nil {
		return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
	} else if ep != nil {
		if err := ep.SameSource(topic, "apply", e.srcSource()); err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
		if err := ep.SamePublication(topic, cfg.Publication); err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
	}
	// A source role that cannot read the key that signs schema-change
	// messages could not check the topic's: refused before anything is
	// made.
	if cfg.DDL != "false" && cfg.DDL != "relation" {
		if _, err := install.CheckApplySourceReads(ctx, src); err != nil {
			return err
		}
	}
	var undo install.Undo
	if err := undo.State(ctx, tgt, cfg.Slot, e.log); err != nil {
		return err
	}
	if err := target.Register(ctx, tgt, cfg.Slot); err != nil {
		return fmt.Errorf("prepare repstream state on the target: %w", pgerr.CreateSchemaPrivilege(tgt.Config().Database, tgt.Config().User).Explain(err))
	}
	if err := e.prepareOrigins(ctx, src, tgt); err != nil {
		return err
	}
	if err := target.WaitForPreviousApply(ctx, tgt, cfg.Slot, 30*time.Second, e.log); err != nil {
		return err
	}
	// Until it streams (tgt closes), this session tells status --kafka
	// that a copy under way has its apply (target.ApplyConnected).
	if err := target.HoldStartLock(ctx, tgt, cfg.Slot); err != nil {
		return err
	}
	prog, err := target.LoadProgress(ctx, tgt, cfg.Slot)
	if err != nil {
		return err
	}
	firstStart := !prog.Exists
	defer func() {
		if err != nil && firstStart {
			undo.Run(ctx, e.log)
		}
	}()
	if err := e.checkTopicID(ctx, adm, tgt, topic, prog); err != nil {
		return err
	}
	// The capture makes the topic first, then the publication and the
	// slot: copy only once they are there, or the copy would miss what
	// the slot never sees.
	if err := waitCaptureSlot(ctx, src, cfg, e); err != nil {
		return err
	}
	if e.ddl, err = captureDDL(ctx, src, cfg); err != nil {
		return err
	}
	// The triggers as the capture left them: were they off while this
	// apply was stopped? (The capture sets them right at its start.)
	if e.ddl == ddlTrigger {
		err = e.sync.TriggersAtStart(ctx, src, tgt, prog.Exists, nil)
	} else {
		err = target.SetTriggerDigest(ctx, tgt, cfg.Slot, target.NoTriggers)
	}
	if err != nil {
		return err
	}
	// The key that signs the trigger's messages, as the capture set it
	// up: this apply checks every schema-change message of the topic.
	if e.ddl == ddlTrigger {
		if err := e.readDDLKey(ctx, src); err != nil {
			return err
		}
	}
	tables, err := install.PublicationTables(ctx, src, cfg.Publication)
	if err != nil {
		return err
	}
	e.schemaMayLag, e.copyResumed = resuming(prog, firstStart, e.ddl)
	// The values' format the capture writes now: a target that cannot
	// take binary ones is refused before anything.
	e.topicBinary = e.topicFormat(ctx, adm, brokers, topic)
	if err := e.prepareTables(ctx, src, tgt, tables, false, prog.Exists && prog.Snapshot == target.SnapshotDone, &undo); err != nil {
		return err
	}
	e.binary = false // each record says its values' format: the writer follows it (change.Relation.Binary)
	if err := install.CheckTablePrivileges(ctx, src, tgt, tables, prog.Snapshot != target.SnapshotDone); err != nil {
		return err
	}
	if err := target.CheckOwners(ctx, tgt, tables, cfg.TrustTableOwners); err != nil {
		return err
	}
	if prog.Snapshot != target.SnapshotDone {
		if !prog.Exists {
			// A first copy goes into tables that hold nothing of this
			// replication: rows already there are the user's, refused
			// as run refuses them, unless --truncate says to empty them
			// (a target re-seeded after drop --target-only passes it).
			// A copy resumed later empties what it began itself.
			if err := snapshot.CheckTargets(ctx, tgt, tables, cfg.Truncate, e.log); err != nil {
				return err
			}
		}
		// From here this target's start is committed, as a run's is once
		// its slot exists (install.Undo): a copy stopped or failed halfway
		// keeps what it did, and the next start finishes it.
		if err := target.InitProgress(ctx, tgt, cfg.Slot, 0, target.SnapshotRunning, false); err != nil {
			return err
		}
		firstStart = false
		startAt := func(ctx context.Context, restart change.LSN) int64 {
			var o int64
			err := e.kafkaRetry(ctx, "where in topic "+topic+" this copy's transactions begin", func() (err error) {
				o, err = kafkalog.CopyStart(ctx, adm, brokers, topic, restart, topicStart)
				return err
			})
			if err != nil {
				e.log.Warn("cannot find where in the topic this copy's transactions begin: reading it from its start", "topic", topic, "err", err)
				return topicStart
			}
			return o
		}
		if prog, err = e.copyForKafka(ctx, src, tgt, tables, topicStart, startAt); err != nil {
			return err
		}
	}
	if err := e.beforeStreaming(ctx, src, tgt, tables, prog.Low); err != nil {
		return err
	}
	src.Close(ctx)
	tgt.Close(ctx)
	return e.streamKafka(ctx, brokers, topic, prog)
}

// waitCaptureSlot waits up to topicWait for the capture's slot and
// publication on the source.
func waitCaptureSlot(ctx context.Context, src *pgx.Conn, cfg config.Config, e *Engine) error {
	for waited := time.Duration(0); ; waited += 200 * time.Millisecond {
		slot, err := install.LookupSlot(ctx, src, cfg.Slot)
		if err != nil {
			return err
		}
		var pub bool
		if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1)", cfg.Publication).Scan(&pub); err != nil {
			return fmt.Errorf("look up publication %q on the source: %w", cfg.Publication, err)
		}
		switch {
		case slot.Exists && pub:
			return nil
		case waited >= topicWait:
			return fmt.Errorf("replication slot %q or publication %q is missing on the source: `repstream capture --slot %s` makes them; is it running against this source?", cfg.Slot, cfg.Publication, cfg.Slot)
		case waited == 0:
			e.log.Info("waiting for the capture's slot and publication on the source", "slot", cfg.Slot, "publication", cfg.Publication, "up_to", topicWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// captureDDL is how the capture half follows schema changes: by the event
// trigger when it is installed on the source for this slot (the messages
// come in the topic), else from the Relation messages (unless --ddl=false).
func captureDDL(ctx context.Context, src *pgx.Conn, cfg config.Config) (ddlMode, error) {
	switch cfg.DDL {
	case "false":
		return ddlOff, nil
	case "relation":
		return ddlRelation, nil
	}
	var trigger bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = 'repstream_ddl')").Scan(&trigger); err != nil {
		return ddlOff, fmt.Errorf("look up the event trigger on the source: %w", err)
	}
	if trigger {
		return ddlTrigger, nil
	}
	return ddlRelation, nil
}

// slotRestart returns the restart_lsn of the capture's slot (0: unknown):
// every transaction that commits later began at or after it.
func slotRestart(ctx context.Context, src *pgx.Conn, slot string) change.LSN {
	var s *string
	if err := src.QueryRow(ctx, "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s); err != nil || s == nil {
		return 0
	}
	lsn, err := change.ParseLSN(*s)
	if err != nil {
		return 0
	}
	return lsn
}

// copyForKafka makes this target's initial copy (or finishes one an
// earlier start began): the tables not copied yet, at a temporary slot's
// snapshot (tablesync), then the record: applied up to the oldest table's
// sync position, the topic to read from where startAt finds the
// transactions that began after the capture slot's restart_lsn read
// before the first start's copy (kafkalog.CopyStart; that start records
// the offset before it copies), or from its start when no offset was
// recorded.
func (e *Engine) copyForKafka(ctx context.Context, src, tgt *pgx.Conn, tables []schema.TableName, topicStart int64,
	startAt func(context.Context, change.LSN) int64) (target.Progress, error) {
	cfg := e.cfg
	// Before any offset is recorded: the topic they are offsets of.
	if err := target.SetKafkaTopic(ctx, tgt, cfg.Slot, e.topicID); err != nil {
		return target.Progress{}, err
	}
	e.setPhase("copying")
	syncs, err := target.LoadTableSyncs(ctx, tgt, cfg.Slot)
	if err != nil {
		return target.Progress{}, err
	}
	var restart change.LSN // 0: read the topic from its start, or from the offset a first start recorded
	if len(syncs) == 0 {
		restart = slotRestart(ctx, src, cfg.Slot)
		if restart != 0 {
			// Recorded before the copy begins: a start that finishes
			// a copy this one leaves reads the topic from there too
			// (every transaction committing after any later snapshot
			// began after restart as well).
			if err := target.AdvanceLowAt(ctx, tgt, cfg.Slot, 0, startAt(ctx, restart)); err != nil {
				return target.Progress{}, err
			}
		}
	}
	if err := e.sync.ResumeCopy(ctx, tgt, tables); err != nil {
		return target.Progress{}, err
	}
	if syncs, err = target.LoadTableSyncs(ctx, tgt, cfg.Slot); err != nil {
		return target.Progress{}, err
	}
	var low change.LSN
	for i, s := range syncs {
		if i == 0 || s.SyncLSN < low {
			low = s.SyncLSN
		}
	}
	offset := topicStart
	if restart != 0 {
		offset = max(topicStart, startAt(ctx, restart))
	} else if prog, err := target.LoadProgress(ctx, tgt, cfg.Slot); err != nil {
		return target.Progress{}, err
	} else if prog.KafkaOffset >= 0 {
		offset = max(topicStart, prog.KafkaOffset) // the first start's (an earlier version's first start recorded none)
	}
	// The offset first, then the copy done: a stop in between copies again
	// rather than leave a finished copy without its offset.
	if err := target.AdvanceLowAt(ctx, tgt, cfg.Slot, low, offset); err != nil {
		return target.Progress{}, err
	}
	if err := target.InitProgress(ctx, tgt, cfg.Slot, low, target.SnapshotDone, false); err != nil {
		return target.Progress{}, err
	}
	e.log.Info("initial copy done: the topic's transactions after it follow", "applied_up_to", low, "topic_offset", offset,
		"capture_slot_restart", restart, "topic_start", topicStart)
	return target.LoadProgress(ctx, tgt, cfg.Slot)
}

// streamKafka applies the topic from the recorded offset: a Reader feeds
// the slot's messages to a capture.Decoder into the queue, apply applies
// it as in run, and the low watermark is recorded with the offset to read
// from again.
func (e *Engine) streamKafka(ctx context.Context, brokers kafkalog.Cluster, topic string, prog target.Progress) error {
	cfg := e.cfg
	tgt, err := target.Connect(ctx, cfg.Target, "repstream-admin")
	if err != nil {
		return onSide("target", err)
	}
	defer tgt.Close(context.Background())
	from := prog.KafkaOffset
	if from < 0 {
		from = 0
	}
	admin, admCl, err := kafkalog.NewAdmin(brokers)
	if err != nil {
		return err
	}
	defer admCl.Close()
	if err := kafkalog.CheckStart(ctx, admin, topic, from); err != nil {
		return e.reseedAdvice(err)
	}
	q, err := queue.New(queue.Options{Budget: int64(cfg.Memory), SpillDir: cfg.SpillDir, Lock: e.spillLock, Stats: e.stats, Logger: e.log, Producer: e.stats.Component("capture")})
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	defer q.Close()
	e.queue = q
	e.wm = apply.NewWatermark(prog.Low)
	e.wm.TraceLatency(e.stats.CommitLatency(), stats.StageVisible, stats.StageDurable)
	e.watchWatermark(e.wm)
	e.setPhase("streaming")
	wm := e.wm
	skips, err := target.LoadSkipRequests(ctx, tgt, cfg.Slot, prog.Low)
	if err != nil {
		return err
	}
	// Eager apply of a large transaction while the topic brings it in
	// progress, as in run; a new capture session rolls it back (the
	// decoder's Close) and it comes again from its start.
	var eager *apply.Eager
	if cfg.Eager && e.eagerWithConflicts(cfg.OnError, len(skips)) {
		skipBelow := prog.Low
		for _, a := range prog.Applied {
			skipBelow = max(skipBelow, a)
		}
		eager = apply.NewEager(apply.EagerOptions{
			Watermark: wm, SkipBelow: skipBelow, Stats: e.stats, Logger: e.log, Tables: e.tables,
			NewWriter: func(ctx context.Context, st *stats.Component) (apply.EagerWriter, func(), error) {
				return target.OpenSession(ctx, target.SessionOptions{
					DSN: cfg.Target, AppName: "repstream-eager",
					Writer: eagerWriter(e.writerOptions(true), st, e.log),
				})
			},
		})
	}
	var dec atomic.Pointer[capture.Decoder] // the session's, for behind
	rd := kafkalog.NewReader(kafkalog.ReaderOptions{
		Brokers: brokers, Topic: topic, From: from, Slot: cfg.Slot, Publication: cfg.Publication,
		Source:  e.srcSource(),
		Applied: prog.IsApplied, AppliedBelow: prog.Low,
		NewDecoder: func(proto int, binary bool, ep *kafkalog.Epoch, after change.LSN) (kafkalog.Decoder, error) {
			// The public keys read at start serve the first session; a
			// later one reads them again at its first schema-change
			// message: its capture published its key and removed those of
			// replaced ones (install.PublishTopicKey) before its marker.
			keys := e.topicKeys
			e.topicKeys = nil
			o := capture.Options{Slot: cfg.Slot, Publication: cfg.Publication, Binary: binary,
				DDLMessages: e.ddl == ddlTrigger, DDLSignedFrom: e.ddlSignedFrom, DDLKeySince: e.ddlKeySince, LastCommit: after,
				TopicKeys: keys, TopicKeysNow: topicKeysNow(cfg.Source),
				Queue: q, Acker: wm, Stats: e.stats, Logger: e.log}
			if len(e.ddlKey) > 0 {
				// A source role that may read the HMAC key: the records an
				// earlier version's capture wrote signed with it are checked.
				o.DDLKey, o.DDLKeyNow = e.ddlKey, ddlKeyNow(cfg.Source, cfg.Slot)
			}
			if eager != nil {
				o.Eager = eager
			}
			d, err := capture.NewDecoder(o, proto)
			if err == nil {
				dec.Store(d)
			}
			return d, err
		},
		AbortInProgress: q.AbortInProgress,
		Logger:          e.log,
		Stats:           e.stats.Component("kafka"),
	})
	e.kafka.Store(rd)
	// A backlog, as Capture.Behind says in run: not while a streamed
	// transaction is open (eager apply waits for what committed before).
	behind := func() bool {
		d := dec.Load()
		return rd.Behind() && (d == nil || !d.Streaming())
	}
	ap, err := apply.New(e.kafkaApplyOptions(prog, wm, behind, eager, skips))
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return rd.Run(gctx) })
	g.Go(func() error { return onSide("target", ap.Run(gctx, q)) })
	if eager != nil {
		g.Go(func() error { return onSide("target", eager.Run(gctx)) })
	}
	g.Go(func() error { return e.sync.Watch(gctx, e.tables, applyPause{ap, eager}, e.ddl != ddlTrigger) })
	pr := &kafkaPersister{tgt: tgt, slot: cfg.Slot, wm: wm, rd: rd, low: prog.Low, offset: from}
	g.Go(func() error { return pr.loop(gctx) })
	err = g.Wait()
	pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	perr := pr.persist(pctx)
	cancel()
	e.logSummary()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || pgerr.ConnectionLost(err)) {
		e.log.Info("stopped", "applied_up_to", wm.Flush(), "topic_offset", pr.offset)
		return e.syncSequencesAtEnd() // --sync-sequences, as run's stop
	}
	return errors.Join(e.reseedAdvice(err), perr)
}

// reseedAdvice says, of an offset gone from the topic (retention), which
// target it is and how to seed it again; other errors are returned as
// they are.
func (e *Engine) reseedAdvice(err error) error {
	if !errors.Is(err, kafkalog.ErrTrimmed) {
		return err
	}
	return fmt.Errorf("target %s: %w: the transactions it still needs are gone from the topic; re-seed this target: `repstream drop --target-only --slot %s --source ... --target ...`, then start `repstream apply --truncate` again (a new initial copy, emptying the tables first)",
		pgDatabase(e.cfg.Target), err, e.cfg.Slot)
}

// checkTopicID reads the id of the topic (e.topicID) and compares it with
// the one the target recorded: a topic deleted and made again under the
// same name since this target last read it starts its offsets again at 0,
// so the recorded offset would skip the new topic's first records, and the
// transactions this target had not applied went with the old topic. That
// stops this apply, naming both ids and the way to re-seed the target.
// A target of an earlier version, which recorded none, records it now.
func (e *Engine) checkTopicID(ctx context.Context, adm *kadm.Client, tgt *pgx.Conn, topic string, prog target.Progress) error {
	id, err := kafkalog.TopicID(ctx, adm, topic)
	if err != nil {
		return fmt.Errorf("kafka %s: %w", e.cfg.Kafka, err)
	}
	e.topicID = id
	if !prog.Exists || id == "" {
		return nil // the first start records it with its copy (copyForKafka)
	}
	if prog.KafkaTopicID != "" && prog.KafkaTopicID != id {
		return e.reseedAdvice(fmt.Errorf("%w: topic %s was deleted and made again since this target last read it (its id was %s, it is %s now): its offsets started again at 0, and what this target had not applied went with the old topic",
			kafkalog.ErrTrimmed, topic, prog.KafkaTopicID, id))
	}
	return target.SetKafkaTopic(ctx, tgt, e.cfg.Slot, id)
}

// kafkaStatus is the apply's position in the topic, for Status.
func (e *Engine) kafkaStatus(s *stats.LiveStatus) {
	s.KafkaTopic = kafkalog.Topic(e.cfg.Slot)
	rd := e.kafka.Load()
	if rd == nil {
		return
	}
	s.KafkaOffset, s.KafkaEnd = rd.Position()
}

// brokerProbeEvery is how often a half asks the brokers whether they are
// there (/metrics repstream_connection_up{side="kafka"}, /healthz).
const brokerProbeEvery = 5 * time.Second

// probeBrokers asks the brokers for their list every brokerProbeEvery until
// ctx ends, recording the answer in the "kafka" component as the source
// and target probes do (stats.GaugeUp, GaugeLastOKUnixNano, InfoLastError,
// and the gauge "brokers"): /healthz says unhealthy while they cannot be
// reached.
func (e *Engine) probeBrokers(ctx context.Context, brokers kafkalog.Cluster) {
	st := e.stats.Component(stats.CompKafka)
	up, lastOK, count := st.Gauge(stats.GaugeUp), st.Gauge(stats.GaugeLastOKUnixNano), st.Gauge("brokers")
	adm, cl, err := kafkalog.NewAdmin(brokers)
	if err != nil {
		st.SetInfo(stats.InfoLastError, err.Error())
		return
	}
	defer cl.Close()
	t := time.NewTicker(brokerProbeEvery)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		bs, err := adm.ListBrokers(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			up.Store(0)
			st.SetInfo(stats.InfoLastError, fmt.Sprintf("kafka %s: %v", e.cfg.Kafka, err))
		} else {
			up.Store(1)
			lastOK.Store(time.Now().UnixNano())
			count.Store(int64(len(bs)))
			st.SetInfo(stats.InfoLastError, "")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// kafkaApplyOptions are apply's options in an apply --kafka: as run's,
// with behind saying when a backlog is read. The stream always comes
// gathered: the capture's Writer makes a record of what comes within its
// linger after a transaction's end, and each fetch brings such records,
// so the coordinator does not wait for a group to fill (apply/linger.go:
// the next fetch comes too late for it; `repstream bench fly --systems
// kafka`: p50 3.5–5.4 ms without the wait, 6.3–6.7 with it, the same CPU).
func (e *Engine) kafkaApplyOptions(prog target.Progress, wm *apply.Watermark, behind func() bool, eager *apply.Eager, skips target.SkipRequests) apply.Options {
	cfg := e.cfg
	o := apply.Options{
		TargetDSN: cfg.Target, Writer: e.writerOptions(false),
		Parallelism: cfg.ApplyParallelism, CommitOrder: cfg.CommitOrder,
		GroupMaxTxns: cfg.GroupMaxTxns, GroupMaxBytes: int64(cfg.GroupMaxBytes), Collapse: cfg.Collapse,
		Applied: prog.IsApplied, Watermark: wm, Stats: e.stats, Logger: e.log,
		CatchUpWait: cfg.CatchUpWait, GroupWait: cfg.GroupWait,
		CatchUpGroupBytes: min(int64(cfg.GroupMaxBytes)/4, int64(cfg.Memory)/8),
		Tables:            e.tables, Quiesce: true,
		Behind: behind, Gathers: func() bool { return true },
		OnError: cfg.OnError, SkipRequested: skips.Take,
	}
	if eager != nil {
		o.Eager = eager
	}
	return o
}

// kafkaPersister records an apply's low watermark in the target with the
// topic offset to read from again (a resume point for that watermark:
// kafkalog.Reader.ResumeOffset), at most every persistEvery.
//
// Invariant: low and offset are what the target has recorded.
type kafkaPersister struct {
	tgt    *pgx.Conn
	slot   string
	wm     *apply.Watermark
	rd     *kafkalog.Reader
	low    change.LSN
	offset int64
}

// persist records the watermark and its offset if either moved.
func (p *kafkaPersister) persist(ctx context.Context) error {
	low := p.wm.Flush()
	off := p.rd.ResumeOffset(low)
	if low <= p.low && off == p.offset {
		return nil
	}
	if err := target.AdvanceLowAt(ctx, p.tgt, p.slot, low, off); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return onSide("target", err)
	}
	p.low, p.offset = low, off
	return nil
}

// loop persists every persistEvery until ctx ends.
func (p *kafkaPersister) loop(ctx context.Context) error {
	t := time.NewTicker(persistEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := inFlight(ctx) // not cancelled under way (recorded.go)
		err := p.persist(pctx)
		cancel()
		if err != nil {
			return err
		}
	}
}

// kafkaRetriable reports whether err is an error the Kafka protocol says
// a later attempt may not meet (a leader election under way, an offset not
// available yet, a broker not the leader any more): the half starts over,
// as for a lost connection, also before it has reached its servers once
// (the brokers answered). Not one a start check has already waited out
// (kafkalog.WaitedOut: it names a setting to look at).
func kafkaRetriable(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke) && ke.Retriable && !kafkalog.WaitedOut(err)
}

// kafkaRetry calls f until it returns nil or an error that is not a
// passing one of the brokers (kafkaRetriable), waiting the engine's
// backoff between attempts and logging what it waits for; it returns f's
// last error, or ctx's once ctx ends. For the start's reads whose error
// is not fatal (topicFormat, the copy's place in the topic), where an
// error would be taken for "not known" although asking again answers.
func (e *Engine) kafkaRetry(ctx context.Context, what string, f func() error) error {
	bo := reconnectBackoff(250*time.Millisecond, e.cfg.ReconnectMaxWait)
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || ctx.Err() != nil || !kafkaRetriable(err) {
			return err
		}
		wait := bo.NextBackOff()
		e.log.Warn("the Kafka brokers answered with an error that passes: waiting, then asking again",
			"side", stats.CompKafka, "for", what, "attempt", attempt, "in", wait.Round(time.Millisecond), "cause", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// onKafkaSide puts a Kafka error that names no side on the brokers' (the
// "kafka" component counts its reconnects); other errors are returned as
// they are.
func onKafkaSide(err error) error {
	var se *sideError
	if errors.As(err, &se) || !kafkaRetriable(err) {
		return err
	}
	return onSide(stats.CompKafka, err)
}
