//go:build race

package queue

// invariants enables the expensive self-checks; they are on in race builds
// (the tests run with -race).
const invariants = true
