package change

import (
	"fmt"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL write-ahead-log position (a byte offset in the WAL).
type LSN uint64

// String formats the LSN as PostgreSQL does: two hexadecimal halves, "16/B374D848".
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// ParseLSN parses the "X/Y" form printed by PostgreSQL.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("parse LSN %q: want the form X/Y", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}
