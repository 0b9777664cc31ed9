// Package monitor reads a running engine from outside, through its
// GET /status endpoint, the way Oracle Streams users read strmmon and the
// Streams Performance Advisor: [Fetch] takes one [Sample], [Measure] turns two
// samples into an [Interval] (per-component rates and the share of the
// interval each component spent busy, idle and waiting — "flow control"),
// [FormatLine] renders it as one 80-column line for `repstream top`, and
// [Advise] applies the advisor's rule to name the bottleneck for
// `repstream advise` and the benchmark reports.
//
// The apply workers ("apply.0", "apply.1", …) are one component "apply" here:
// their rates are summed and their state shares averaged; the busiest worker
// is named beside it.
//
// Everything but Fetch is a pure function of the samples, so it is tested
// without a server.
package monitor
