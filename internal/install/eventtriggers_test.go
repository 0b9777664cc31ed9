package install

import "testing"

func TestSameTriggers(t *testing.T) {
	const (
		three = "repstream_ddl:1/2/A,repstream_ddl_drop:3/4/A,repstream_ddl_partitions:5/6/A"
		four  = three + ",repstream_ddl_types:7/8/A"
	)
	for _, tc := range []struct {
		recorded, now string
		same          bool
	}{
		{four, four, true},
		{three, three + ",repstream_ddl_types:-", true}, // recorded before it existed; not made yet
		{three, four, true},                             // made since by this version's start
		{four, three + ",repstream_ddl_types:-", false}, // dropped
		{four, three + ",repstream_ddl_types:7/9/A", false},
		{three, "repstream_ddl:1/2/A,repstream_ddl_drop:3/4/D,repstream_ddl_partitions:5/6/A,repstream_ddl_types:7/8/A", false},
		{"repstream_ddl:1/2/A,repstream_ddl_drop:3/4/A", four, false},
		{three, "repstream_ddl:1/2/A,repstream_ddl_drop:3/4/A,repstream_ddl_types:7/8/A,zz:1", false},
	} {
		if got := SameTriggers(tc.recorded, tc.now); got != tc.same {
			t.Errorf("SameTriggers(%q, %q) = %v, want %v", tc.recorded, tc.now, got, tc.same)
		}
	}
}
