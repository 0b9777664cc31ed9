package config

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/queue"
)

// Config is everything `repstream run` needs. The YAML keys are the flag names
// with '-' replaced by '_'.
type Config struct {
	Source      string   `yaml:"source"`
	Target      string   `yaml:"target"`
	Tables      []string `yaml:"tables"`
	Publication string   `yaml:"publication"`
	Slot        string   `yaml:"slot"`

	Snapshot        bool `yaml:"snapshot"`
	SnapshotWorkers int  `yaml:"snapshot_workers"`
	Truncate        bool `yaml:"truncate"`
	CreateTables    bool `yaml:"create_tables"`
	// KeepIndexes: the initial copy writes into the target's existing
	// tables with their keys and indexes in place. Without it, a target
	// table that is empty when its copy starts has its keys and indexes
	// (and the foreign keys that reference it) set aside for the copy and
	// rebuilt after it, as they were (target.SetAside).
	KeepIndexes bool `yaml:"keep_indexes"`

	// AdoptSlot: an existing slot for which the target has no state is
	// used from its confirmed position, without an initial copy (the user
	// says the target already holds the data up to there). Without it such
	// a start is refused: the target may be another's, or rebuilt.
	AdoptSlot bool `yaml:"adopt_slot"`
	// PartialPublication: run with a publication that leaves out inserts,
	// updates, deletes or truncates (those changes never reach the
	// target). Without it such a publication is refused.
	PartialPublication bool `yaml:"partial_publication"`
	// TrustTableOwners: a superuser target role writes tables owned by
	// roles that are not superusers, whose code (index expressions,
	// defaults, checks, ENABLE ALWAYS triggers) then runs as a superuser.
	// Without it such a table is refused before a row of it is written
	// (target/owners.go).
	TrustTableOwners bool `yaml:"trust_table_owners"`
	// AllowUntrackedPartitions: run without the schema-change event trigger
	// although a partitioned table is replicated through its root (a
	// TRUNCATE of one partition, ATTACH and DETACH PARTITION then never
	// reach the target). Without it such a run is refused.
	AllowUntrackedPartitions bool `yaml:"allow_untracked_partitions"`

	// SnapshotRangeSize: the initial copy splits a table larger than this
	// into ranges copied in parallel; 0 chooses from the total size.
	SnapshotRangeSize Size `yaml:"snapshot_range_size"`

	Memory   Size   `yaml:"memory"`
	SpillDir string `yaml:"spill_dir"`

	ApplyParallelism int         `yaml:"apply_parallelism"`
	CommitOrder      CommitOrder `yaml:"commit_order"`
	GroupMaxTxns     int         `yaml:"group_max_txns"`
	GroupMaxBytes    Size        `yaml:"group_max_bytes"`
	// CatchUpWait: while a backlog is caught up, how long a group may wait
	// for more transactions (fewer, larger target transactions); 0: never.
	CatchUpWait time.Duration `yaml:"catch_up_wait"`
	// GroupWait: while source transactions come less than this apart,
	// capture's read between transactions waits up to this long for more
	// (fewer wake-ups, fewer and larger target transactions at a steady
	// rate), or, where capture does not (a Unix socket, a fast stream), a
	// group waits up to this long for more: at most this much latency; 0:
	// never.
	GroupWait time.Duration `yaml:"group_wait"`
	Eager     bool          `yaml:"eager"`

	// OnError says what a data conflict (a duplicate key, a missing row, a
	// violated constraint, a refused value) does: stop the run, or park the
	// source transaction in the target's error queue and go on.
	OnError OnError `yaml:"on_error"`

	// Collapse folds repeated changes to one key within a target
	// transaction (insert+update → insert, update+update → update, …) on
	// tables where that is safe: the only unique index is the key, no
	// ENABLE ALWAYS trigger or rule.
	Collapse bool `yaml:"collapse"`

	// Binary asks pgoutput for the binary format of values and applies them
	// with binary COPY and binary statement parameters: no text conversion
	// on either server. It is used only when every replicated column has the
	// same built-in type on both sides; otherwise the run uses text (logged).
	Binary bool `yaml:"binary"`

	// Origin (run, capture): "any" captures every transaction of the
	// source; "none" leaves out those that carry a replication origin —
	// written by a replication into the source (repstream's apply, a
	// native subscription) — as PostgreSQL 16's subscription option of
	// that name. Two replications in opposite directions need "none".
	Origin string `yaml:"origin"`

	// DDL: how schema changes on the source reach the target: "true" (an
	// event trigger on the source reports them, falling back to "relation"
	// when the source role may not create it), "relation" (followed from
	// pgoutput's Relation messages: no RENAME, no defaults) or "false"
	// (not at all: a change stops the run).
	DDL string `yaml:"ddl"`
	// PublicationPoll: without the event trigger, how often a running
	// engine compares the publication with the tables it replicates
	// (tablesync's publication poll).
	PublicationPoll time.Duration `yaml:"publication_poll"`

	UntilCaughtUp bool `yaml:"until_caught_up"`
	// SyncSequences copies the positions of the replicated tables'
	// sequences to the target when the run ends caught up or is stopped
	// cleanly (engine.SyncSequences): the cutover points.
	SyncSequences  bool          `yaml:"sync_sequences"`
	HTTP           string        `yaml:"http"`
	StatusInterval time.Duration `yaml:"status_interval"`
	Progress       time.Duration `yaml:"progress"`
	LogLevel       string        `yaml:"log_level"`
	LogFormat      string        `yaml:"log_format"`      // text or json (Logging)
	HealthzMaxLag  time.Duration `yaml:"healthz_max_lag"` // /healthz answers 503 above this apply lag (0: never)

	// DecodingWorkMem is the replication session's logical_decoding_work_mem:
	// transactions larger than this are streamed while in progress. 16MB was
	// the best of 4/16/64MB for both backlog throughput and eager apply
	// (repstream bench conditions --mode backlog and bench pedestals with
	// --vary decoding-work-mem=4MB,16MB,64MB, 2 CPUs).
	DecodingWorkMem string `yaml:"decoding_work_mem"`

	// SourceTimeout and TargetTimeout detect a link that is open but
	// silent (capture.Options.Timeout, target.LinkWatch); 0 turns the
	// detection off. ReconnectMaxWait caps the wait between reconnect
	// attempts (engine: exponential backoff with jitter).
	SourceTimeout    time.Duration `yaml:"source_timeout"`
	TargetTimeout    time.Duration `yaml:"target_timeout"`
	ReconnectMaxWait time.Duration `yaml:"reconnect_max_wait"`

	// Kafka is the brokers (host:port,...) of `capture` and `apply`,
	// which are joined by the slot's topic (package kafkalog); Role says
	// which half this process is ("" for `run`: both, no broker).
	Kafka string `yaml:"kafka"`
	Role  Role   `yaml:"-"`
	// How the brokers are reached (kafkalog.Security): TLS (KafkaCA, the
	// CAs of the brokers' certificates; KafkaCert and KafkaKey, a client
	// certificate), SASL (KafkaSASL the mechanism, KafkaUser; the password
	// only from the environment, kafkalog.EnvPassword).
	KafkaTLS  bool   `yaml:"kafka_tls"`
	KafkaCA   string `yaml:"kafka_ca"`
	KafkaCert string `yaml:"kafka_cert"`
	KafkaKey  string `yaml:"kafka_key"`
	KafkaSASL string `yaml:"kafka_sasl"`
	KafkaUser string `yaml:"kafka_user"`
	// KafkaTxnTimeout is the timeout of the capture's Kafka transactions
	// (kafkalog.TxnTimeout by default; at most the brokers'
	// transaction.max.timeout.ms).
	KafkaTxnTimeout time.Duration `yaml:"kafka_txn_timeout"`
	// KafkaLinger is how long the capture holds a record after a
	// transaction's end for the transactions that follow, unless it holds
	// 64 KiB (kafkalog.DefaultLinger; 0: the default).
	KafkaLinger time.Duration `yaml:"kafka_linger"`
	// KafkaCompression is the codec of the capture's batches
	// (kafkalog.Compressions; "": kafkalog.DefaultCompression, snappy).
	KafkaCompression string `yaml:"kafka_compression"`
}

// Role is which half of the replication a process runs.
type Role string

const (
	RoleRun     Role = ""        // capture and apply in one process (`run`)
	RoleCapture Role = "capture" // the slot into a Kafka topic (`capture --kafka`)
	RoleApply   Role = "apply"   // a Kafka topic into the target (`apply --kafka`)
)

// Default returns the configuration with every default filled in.
func Default() Config {
	return Config{
		Slot:             "repstream",
		Snapshot:         true,
		SnapshotWorkers:  4,
		Memory:           256 << 20,
		ApplyParallelism: DefaultParallelism(),
		CommitOrder:      CommitFull,
		OnError:          OnErrorStop,
		GroupMaxTxns:     1000,
		GroupMaxBytes:    16 << 20,
		CatchUpWait:      50 * time.Millisecond,
		GroupWait:        2 * time.Millisecond,
		Eager:            true,
		Collapse:         true,
		Binary:           true,
		Origin:           OriginAny,
		DDL:              "true",
		PublicationPoll:  5 * time.Second,
		StatusInterval:   10 * time.Second,
		LogLevel:         "info",
		LogFormat:        "text",
		HealthzMaxLag:    5 * time.Minute,
		DecodingWorkMem:  "16MB",
		SourceTimeout:    30 * time.Second,
		TargetTimeout:    30 * time.Second,
		ReconnectMaxWait: 30 * time.Second,
	}
}

// Values of Config.Origin (PostgreSQL's names).
const (
	OriginAny  = "any"
	OriginNone = "none"
)

// DefaultParallelism is the number of CPUs, at most 8.
func DefaultParallelism() int { return min(runtime.NumCPU(), 8) }

// Load reads a YAML file on top of the defaults. A file other users may
// write is refused (as ssh refuses one): any of them could point
// repstream at a server of theirs, or change what it runs.
func Load(path string) (Config, error) {
	c := Default()
	f, err := os.Open(path)
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return c, fmt.Errorf("read config: %w", err)
	} else if fi.Mode().Perm()&0o022 != 0 {
		return c, fmt.Errorf("config %s is writable by other users (mode %04o): any of them could point repstream at another server or change what it does; run chmod go-w %s", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := Parse(b, &c); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML into c, rejecting unknown keys.
func Parse(b []byte, c *Config) error {
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// EnsureDefaults fills what is derived from other settings and clamps what
// has a floor, in one place: every command calls it on the configuration it
// resolved (cli), and so do the entry points (engine.New, tablesync.AddTables, ...)
// for a configuration built in code; Validate then only checks. It is
// idempotent.
//
//   - the publication defaults to the slot's name;
//   - --ddl defaults to true;
//   - the spill directory defaults to queue.DefaultSpillDir(slot): private
//     to this user and stable per slot, so that a crashed run's stale files
//     are found ($TMPDIR/repstream-<euid>/spill-<slot>, queue/dir.go);
//     a run holds it locked, so two replications of the same slot name on
//     one host (of different sources) cannot share it: the second stops at
//     its start and needs a --spill-dir of its own;
//   - group limits and snapshot workers are at least 1; a status interval
//     out of (0, 30s] is 10s.
func (c *Config) EnsureDefaults() {
	if c.Slot == "" {
		c.Slot = Default().Slot
	}
	if c.Publication == "" {
		c.Publication = c.Slot
	}
	if c.DDL == "" {
		c.DDL = "true"
	}
	if c.SpillDir == "" {
		c.SpillDir = queue.DefaultSpillDir(c.Slot)
		if c.Role == RoleApply {
			// One apply per target of the slot, maybe on one machine: a
			// spill directory each.
			c.SpillDir = queue.DefaultSpillDir(fmt.Sprintf("%s-apply-%08x", c.Slot, crc32.ChecksumIEEE([]byte(c.Target))))
		}
	}
	if c.Origin == "" {
		c.Origin = OriginAny
	}
	c.GroupMaxTxns = max(c.GroupMaxTxns, 1)
	c.GroupMaxBytes = max(c.GroupMaxBytes, 1)
	c.SnapshotWorkers = max(c.SnapshotWorkers, 1)
	if c.StatusInterval <= 0 || c.StatusInterval > 30*time.Second {
		c.StatusInterval = 10 * time.Second
	}
	if c.PublicationPoll <= 0 {
		c.PublicationPoll = 5 * time.Second
	}
}

// Validate checks the configuration (after EnsureDefaults); it changes
// nothing.
func (c *Config) Validate() error {
	var errs []error
	if c.Source == "" {
		errs = append(errs, errors.New("--source is required"))
	}
	if c.Target == "" && c.Role != RoleCapture {
		errs = append(errs, errors.New("--target is required"))
	}
	errs = append(errs, checkDSN("--source", c.Source))
	if c.Role != RoleCapture {
		errs = append(errs, checkDSN("--target", c.Target))
	}
	if c.Role != RoleRun {
		if c.Kafka == "" {
			errs = append(errs, fmt.Errorf("%s: --kafka (the brokers, host:port,...) is required", c.Role))
		}
		if c.UntilCaughtUp {
			errs = append(errs, fmt.Errorf("%s: --until-caught-up is for run only", c.Role))
		}
	}
	if c.Slot == "" || !validSlotName(c.Slot) {
		errs = append(errs, fmt.Errorf("--slot %q: use lower-case letters, digits and underscores (at most 63)", c.Slot))
	}
	switch c.Origin {
	case OriginAny, OriginNone:
		if c.Role == RoleApply && c.Origin != OriginAny {
			errs = append(errs, errors.New("apply: --origin is the capture's (what it leaves out never reaches the topic): pass it to repstream capture"))
		}
	default:
		errs = append(errs, fmt.Errorf("--origin %q: want any or none", c.Origin))
	}
	switch c.DDL {
	case "true", "false", "relation":
	default:
		errs = append(errs, fmt.Errorf("--ddl %q: want true, false or relation", c.DDL))
	}
	if c.Memory < 1<<20 {
		errs = append(errs, fmt.Errorf("--memory %s: at least 1MiB", c.Memory))
	}
	if c.ApplyParallelism < 1 || c.ApplyParallelism > 64 {
		errs = append(errs, fmt.Errorf("--apply-parallelism %d: between 1 and 64", c.ApplyParallelism))
	}
	if err := c.CommitOrder.validate(); err != nil {
		errs = append(errs, fmt.Errorf("--commit-order: %w", err))
	}
	if err := c.OnError.validate(); err != nil {
		errs = append(errs, fmt.Errorf("--on-error: %w", err))
	}
	if c.GroupWait < 0 || c.GroupWait > 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--group-wait %s: between 0 (off) and 100ms", c.GroupWait))
	}
	if c.CatchUpWait < 0 || c.CatchUpWait > time.Second {
		errs = append(errs, fmt.Errorf("--catch-up-wait %s: between 0 (off) and 1s", c.CatchUpWait))
	}
	if c.KafkaLinger < 0 || c.KafkaLinger > time.Second {
		errs = append(errs, fmt.Errorf("--kafka-linger %s: between 0 (the default) and 1s", c.KafkaLinger))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--source-timeout", c.SourceTimeout}, {"--target-timeout", c.TargetTimeout}} {
		if d.v != 0 && d.v < 3*time.Second {
			errs = append(errs, fmt.Errorf("%s %s: 0 (off) or at least 3s", d.flag, d.v))
		}
	}
	if c.ReconnectMaxWait < time.Second {
		errs = append(errs, fmt.Errorf("--reconnect-max-wait %s: at least 1s", c.ReconnectMaxWait))
	}
	errs = append(errs, c.validateLogging()...)
	for _, t := range c.Tables {
		if strings.TrimSpace(t) == "" {
			errs = append(errs, errors.New("--tables has an empty entry"))
		}
	}
	return errors.Join(errs...)
}

func validSlotName(s string) bool {
	if len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// CommitOrder says which target commits keep the source's order.
type CommitOrder string

const (
	// CommitFull: every target transaction commits in source commit order
	// (a reader of the target never sees a later transaction without an
	// earlier one). The default.
	CommitFull CommitOrder = "full"
	// CommitDependent: only transactions that touch a common key are
	// ordered; independent ones may commit in any order (more parallel).
	CommitDependent CommitOrder = "dependent"
)

func (o CommitOrder) String() string { return string(o) }

// Set implements pflag.Value: a value other than full or dependent is an
// error.
func (o *CommitOrder) Set(v string) error {
	n := CommitOrder(strings.TrimSpace(v))
	if err := n.validate(); err != nil {
		return err
	}
	*o = n
	return nil
}

// Type implements pflag.Value.
func (o *CommitOrder) Type() string { return "full|dependent" }

// UnmarshalYAML rejects unknown values.
func (o *CommitOrder) UnmarshalYAML(n *yaml.Node) error { return o.Set(n.Value) }

func (o CommitOrder) validate() error {
	switch o {
	case CommitFull, CommitDependent:
		return nil
	}
	return fmt.Errorf("%q: want %s or %s", string(o), CommitFull, CommitDependent)
}

// Size is a byte count that parses "256MiB", "64MB", "1GiB", "512k" or plain bytes.
type Size int64

func (s Size) String() string {
	switch {
	case s >= 1<<30 && s%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", s>>30)
	case s >= 1<<20 && s%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", s>>20)
	case s >= 1<<10 && s%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", s>>10)
	}
	return strconv.FormatInt(int64(s), 10)
}

// Set implements pflag.Value.
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = n
	return nil
}

// Type implements pflag.Value.
func (s *Size) Type() string { return "size" }

// UnmarshalYAML accepts a number or a string with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error { return s.Set(n.Value) }

// ParseSize parses a byte size with an optional unit (B, k/KB/KiB, M/MB/MiB,
// G/GB/GiB; decimal and binary units are both taken as powers of 1024).
func ParseSize(v string) (Size, error) {
	t := strings.TrimSpace(v)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit such as 64MiB", v)
	}
	mult := 1.0
	switch unit {
	case "", "b":
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	case "t", "tb", "tib":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q", v, unit)
	}
	return Size(n * mult), nil
}

// checkDSN reports a connection string that does not parse or has an
// unknown key (pgdsn), before anything connects.
func checkDSN(flag, dsn string) error {
	if dsn == "" {
		return nil
	}
	if _, err := pgdsn.Parse(dsn); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}
