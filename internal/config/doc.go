// Package config holds repstream's run configuration: defaults, validation, and
// loading from a YAML file (the command-line flags, applied over it by the
// cli, take precedence). Config is what `repstream run`, `capture` and
// `apply` need; EnsureDefaults fills the settings derived from others,
// Validate only checks. Its value types (Size, CommitOrder, OnError)
// implement pflag.Value and reject unknown values in YAML too.
//
// Files:
//
//	doc.go           this overview
//	config.go        Config, Role, Default, Load (refuses a file others may write), Parse, EnsureDefaults, Validate; CommitOrder, Size, ParseSize
//	logging.go       LogLevels, LogFormats, ParseLogLevel, NewLogger: --log-level and --log-format
//	onerror.go       OnError (--on-error stop or park)
//	config_test.go   sizes, YAML, defaults, validation (origin, commit order, connection string keys), Load's file mode check
//	logging_test.go  NewLogger's levels and formats
//	onerror_test.go  OnError's values, from flags and YAML
package config
