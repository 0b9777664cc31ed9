package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/healthcheck"
)

// TestCheckSaysWhatDDLNeeds: a target role granted what the rows need but
// not owning the table cannot apply the source's schema changes: check
// warns, naming the owner and the fix, unless --ddl=false.
func TestCheckSaysWhatDDLNeeds(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE cd (id int PRIMARY KEY, v text)`)
	r := newLPRoles(e)
	cfg := e.lpConfig(r)
	e.srcExec(fmt.Sprintf(`GRANT SELECT ON cd TO %s`, r.src))
	e.srcExec(fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE cd`, cfg.Slot))
	e.tgtParamACL(`GRANT SET ON PARAMETER session_replication_role TO ` + r.tgt)
	e.tgtExec(fmt.Sprintf(`GRANT CREATE ON DATABASE %s TO %s`, e.tgtDB, r.tgt))
	e.tgtExec(fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON cd TO %s`, r.tgt))
	for _, ddl := range []string{"", "false"} {
		rep, err := healthcheck.Run(t.Context(), healthcheck.Options{Source: cfg.Source, Target: cfg.Target, Slot: cfg.Slot, DDL: ddl})
		if err != nil {
			t.Fatal(err)
		}
		var warned *healthcheck.Item
		for i, it := range rep.Items {
			if it.Side == "target" && it.Check == "table public.cd" && it.Level == healthcheck.Warn {
				warned = &rep.Items[i]
			}
		}
		switch {
		case ddl == "" && (warned == nil || !strings.Contains(warned.Fix, "OWNER TO") || !strings.Contains(warned.Detail, "schema changes")):
			t.Errorf("check with schema changes followed: %+v, want a WARN naming ownership", warned)
		case ddl == "false" && warned != nil:
			t.Errorf("check with --ddl=false warns: %+v", warned)
		}
	}
}
