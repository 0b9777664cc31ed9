// Package golden compares test output with files under testdata/; run the
// tests with -update to rewrite them.
//
// Check reports a mismatch as a test error showing both texts; a missing
// file fails the test.
//
// Files:
//
//	doc.go    this overview
//	golden.go Check and the -update flag
package golden
