package config

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// OnError says what apply does with a source transaction the target refuses
// for its data (a duplicate key, a missing row, a violated constraint, a
// value the column refuses).
type OnError string

const (
	// OnErrorStop: the run stops with an error naming the table, key,
	// conflict kind and the transaction's LSNs (the default).
	OnErrorStop OnError = "stop"
	// OnErrorPark: the transaction is parked in the target's error queue
	// (repstream.errors) and the run goes on; `repstream errors` lists,
	// retries and skips parked transactions.
	OnErrorPark OnError = "park"
)

func (o OnError) String() string { return string(o) }

// Set implements pflag.Value: a value other than stop or park is an error.
func (o *OnError) Set(v string) error {
	n := OnError(strings.TrimSpace(v))
	if err := n.validate(); err != nil {
		return err
	}
	*o = n
	return nil
}

// Type implements pflag.Value.
func (o *OnError) Type() string { return "stop|park" }

// UnmarshalYAML rejects unknown values.
func (o *OnError) UnmarshalYAML(n *yaml.Node) error { return o.Set(n.Value) }

func (o OnError) validate() error {
	switch o {
	case OnErrorStop, OnErrorPark:
		return nil
	}
	return fmt.Errorf("%q: want %s or %s", string(o), OnErrorStop, OnErrorPark)
}
