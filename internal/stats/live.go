package stats

// LiveStatus is what a running engine reports at /status next to its
// stats: its positions, and (LiveMonitoring) its phase, lags, slot and
// health. The engine fills it; `top`, `advise` and the bench read it here,
// without linking the engine.
type LiveStatus struct {
	Slot          string  `json:"slot"`
	ReceivedLSN   string  `json:"received_lsn"`
	FlushedLSN    string  `json:"flushed_lsn"`
	AppliedLow    string  `json:"applied_low"`
	PendingTxns   int     `json:"pending_txns"`
	StopAt        string  `json:"stop_at,omitempty"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Role is "capture" or "apply" for the halves joined by Kafka ("" for
	// run); an apply's position in the slot's topic: the next offset it
	// reads and the topic's end as last seen.
	Role        string `json:"role,omitempty"`
	KafkaTopic  string `json:"kafka_topic,omitempty"`
	KafkaOffset int64  `json:"kafka_offset,omitempty"`
	KafkaEnd    int64  `json:"kafka_end,omitempty"`

	LiveMonitoring
}

// LiveMonitoring is what /status adds for monitoring: the run's phase, the
// lags, the slot as last polled and the /healthz verdict.
type LiveMonitoring struct {
	Phase                string   `json:"phase,omitempty"`
	SourceWALLSN         string   `json:"source_wal_lsn,omitempty"`
	SourceLagBytes       *int64   `json:"source_lag_bytes,omitempty"` // absent until the source is polled
	ApplyLagSeconds      float64  `json:"apply_lag_seconds"`
	SlotRetainedWALBytes int64    `json:"slot_retained_wal_bytes"`
	SlotWALStatus        string   `json:"slot_wal_status,omitempty"`
	Healthy              bool     `json:"healthy"`
	HealthReasons        []string `json:"health_reasons,omitempty"`
}
