package target

import "github.com/repstream/repstream/internal/pgerr"

// Apply errors: what a failed group's error says about retrying it, and
// which COPY line and column it names (the server's context line, parsed by
// pgerr).

// CopyErrorColumn returns the column a COPY error's context names
// ("COPY t, line N, column c: value"), or "".
func CopyErrorColumn(err error) string {
	cc, _ := pgerr.CopyWhere(err)
	return cc.Column
}

func columnSuffix(err error) string {
	if c := CopyErrorColumn(err); c != "" {
		return ", column " + c
	}
	return ""
}

// Retryable reports whether a group that failed with err can succeed when
// applied again after every earlier group has committed: always for a
// deadlock or serialization failure; for a unique or exclusion violation
// only on the first failure (concurrent, firstTry), when an earlier group
// that frees the value may not have committed yet — once they all have, the
// violation is real.
func Retryable(err error, firstTry bool) bool {
	return pgerr.TxnConflict(err) || firstTry && pgerr.UniqueConflict(err)
}

// copyErrorLine extracts N from a COPY error's context line
// "COPY t, line N[, column c][: value]", or returns 0.
func copyErrorLine(err error) int {
	cc, _ := pgerr.CopyWhere(err)
	return cc.Line
}

// explainDenied turns a permission-denied error writing schema.table into
// one naming the GRANT the session's role needs (pgerr.WritePrivilege);
// other errors pass through.
func (w *Writer) explainDenied(schema, table string, err error) error {
	if !pgerr.PermissionDenied(err) {
		return err
	}
	name := pgerr.QuoteName(schema) + "." + pgerr.QuoteName(table)
	if pgerr.RowSecurity(err) {
		return pgerr.TargetRowSecurityPrivilege(name, w.conn.Config().User).Explain(err)
	}
	return pgerr.WritePrivilege(name, w.conn.Config().User).Explain(err)
}
