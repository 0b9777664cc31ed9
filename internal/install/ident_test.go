package install

import "testing"

func TestIdentChange(t *testing.T) {
	for _, c := range []struct {
		recorded, now string
		what          string
		adopt         bool
	}{
		{"16384/16390/-/751", "16384/16390/-/751", "", false},
		{"16384/16390/-/751", "16400/16390/-/751", "table", false},
		{"16384/16390/-/751", "16384/16401/-/751", "entry", false},
		{"16384/-/16395/751", "16384/-/16402/751", "entry", false},
		{"16384/16390/-/751", "16384/16390/-/802", "publication", false},
		// An earlier version's identity, without the publication part.
		{"16384/16390/-", "16384/16390/-/802", "", true},
		{"16384/16390/-", "16384/16401/-/802", "entry", false},
		{"16384/16390/-", "16385/16390/-/802", "table", false},
		{"garbage", "16384/16390/-/802", "table", false},
		// A table a schema-change message made: its oid alone.
		{"16384", "16384/16390/-/802", "", true},
		{"16384", "16385/16390/-/802", "table", false},
	} {
		what, adopt := IdentChange(c.recorded, c.now)
		if what != c.what || adopt != c.adopt {
			t.Errorf("IdentChange(%q, %q) = %q, %v; want %q, %v", c.recorded, c.now, what, adopt, c.what, c.adopt)
		}
	}
}
