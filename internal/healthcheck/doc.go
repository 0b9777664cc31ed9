// Package healthcheck is `repstream check`: a health and configuration
// report of a source/target pair, one item per line with OK, WARN or FAIL
// and the fix, in the spirit of the Oracle Streams health-check script.
//
// It only reads: both sessions run with default_transaction_read_only = on
// and every query is a SELECT or SHOW of settings and catalogs, so running it
// against production servers changes nothing on either.
package healthcheck
