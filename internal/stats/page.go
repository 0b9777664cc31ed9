package stats

import _ "embed"

// livePage is the page served at /: plain HTML and JS, no external
// resources, redrawn from /status every 2 s.
//
//go:embed web/index.html
var livePage []byte
