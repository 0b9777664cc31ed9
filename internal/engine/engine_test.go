package engine

import "testing"

func TestProcs(t *testing.T) {
	tests := []struct{ parallelism, cpus, want int }{
		{1, 2, 1}, {2, 2, 1}, {4, 2, 1}, {5, 8, 2}, {8, 8, 2}, {8, 1, 1}, {0, 4, 1},
	}
	for _, tt := range tests {
		if got := Procs(tt.parallelism, tt.cpus); got != tt.want {
			t.Errorf("Procs(%d, %d) = %d, want %d", tt.parallelism, tt.cpus, got, tt.want)
		}
	}
}
