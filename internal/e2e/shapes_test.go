package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestTableShapes: table shapes beyond the types — quoted and reserved
// identifiers, a dropped column on the source, target columns in another
// order with an extra column, inheritance, partitions published leaf by
// leaf, REPLICA IDENTITY USING INDEX, FULL identity with duplicate rows,
// large TOASTed values left unchanged by updates, key updates, a wide
// table — in the initial copy and in streaming, binary and text, into
// target tables made by hand and by --create-tables.
func TestTableShapes(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	const src = `
CREATE SCHEMA "My Schema";
CREATE TABLE "My Schema"."Weird ""Name""" ("select" int PRIMARY KEY, "MixedCase" text, "from" date);
CREATE TABLE dropped (id int PRIMARY KEY, gone text, v int, later text);
ALTER TABLE dropped DROP COLUMN gone;
CREATE TABLE reorder (id int PRIMARY KEY, a text, b int, c numeric);
CREATE TABLE parent (id int PRIMARY KEY, kind text);
CREATE TABLE child (extra int) INHERITS (parent);
ALTER TABLE child ADD PRIMARY KEY (id);
CREATE TABLE leafy (id int, region int, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE leafy_1 PARTITION OF leafy FOR VALUES IN (1);
CREATE TABLE leafy_2 PARTITION OF leafy FOR VALUES IN (2);
CREATE TABLE uix (id int NOT NULL, code text NOT NULL, v int);
CREATE UNIQUE INDEX uix_code ON uix (code);
ALTER TABLE uix REPLICA IDENTITY USING INDEX uix_code;
CREATE TABLE dup (a int, b text);
ALTER TABLE dup REPLICA IDENTITY FULL;
CREATE TABLE toasty (id int PRIMARY KEY, big text, small int, bb bytea);
CREATE TABLE keymove (id int PRIMARY KEY, v text);
CREATE TABLE gen (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED);
`
	wide := func() string {
		var b strings.Builder
		b.WriteString("CREATE TABLE wide (id int PRIMARY KEY")
		for i := 0; i < 150; i++ {
			fmt.Fprintf(&b, ", c%d int", i)
		}
		b.WriteString(")")
		return b.String()
	}()
	const tgt = `
CREATE SCHEMA "My Schema";
CREATE TABLE "My Schema"."Weird ""Name""" ("select" int PRIMARY KEY, "MixedCase" text, "from" date);
CREATE TABLE dropped (id int PRIMARY KEY, v int, later text);
CREATE TABLE reorder (c numeric, extra text DEFAULT 'x', b int, id int PRIMARY KEY, a text);
CREATE TABLE parent (id int PRIMARY KEY, kind text);
CREATE TABLE child (id int PRIMARY KEY, kind text, extra int);
CREATE TABLE leafy (id int, region int, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE leafy_1 PARTITION OF leafy FOR VALUES IN (1);
CREATE TABLE leafy_2 PARTITION OF leafy FOR VALUES IN (2);
CREATE TABLE uix (id int NOT NULL, code text NOT NULL, v int);
CREATE UNIQUE INDEX uix_code ON uix (code);
CREATE TABLE dup (a int, b text);
CREATE TABLE toasty (id int PRIMARY KEY, big text, small int, bb bytea);
CREATE TABLE keymove (id int PRIMARY KEY, v text);
CREATE TABLE gen (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED);
`
	load := func(e *env, base int) {
		e.srcExec(fmt.Sprintf(`INSERT INTO "My Schema"."Weird ""Name""" SELECT g, 'Mc' || g, date '2024-01-01' + g FROM generate_series(%d, %d) g`, base+1, base+50))
		e.srcExec(fmt.Sprintf(`INSERT INTO dropped (id, v, later) SELECT g, g, 'l' || g FROM generate_series(%d, %d) g`, base+1, base+50))
		e.srcExec(fmt.Sprintf(`INSERT INTO reorder SELECT g, 'a' || g, g * 2, g / 3.0 FROM generate_series(%d, %d) g`, base+1, base+50))
		e.srcExec(fmt.Sprintf(`INSERT INTO parent SELECT g, 'p' FROM generate_series(%d, %d) g`, base+1, base+20))
		e.srcExec(fmt.Sprintf(`INSERT INTO child SELECT g, 'c', g FROM generate_series(%d, %d) g`, base+21, base+40))
		e.srcExec(fmt.Sprintf(`INSERT INTO leafy SELECT g, 1 + g %% 2, 'v' || g FROM generate_series(%d, %d) g`, base+1, base+50))
		e.srcExec(fmt.Sprintf(`INSERT INTO uix SELECT g, 'code' || g, g FROM generate_series(%d, %d) g`, base+1, base+50))
		e.srcExec(`INSERT INTO dup VALUES (1, 'same'), (1, 'same'), (1, 'same'), (2, NULL), (2, NULL)`)
		e.srcExec(fmt.Sprintf(`INSERT INTO toasty SELECT g, repeat(md5(g::text), 40000), g, decode(repeat('00ff', 100000), 'hex') FROM generate_series(%d, %d) g`, base+1, base+5))
		e.srcExec(fmt.Sprintf(`INSERT INTO keymove SELECT g, 'k' || g FROM generate_series(%d, %d) g`, base+1, base+50))
		e.srcExec(fmt.Sprintf(`INSERT INTO gen (id, a) SELECT g, g FROM generate_series(%d, %d) g`, base+1, base+50))
		e.srcExec(fmt.Sprintf(`INSERT INTO wide (id) SELECT g FROM generate_series(%d, %d) g`, base+1, base+20))
		e.srcExec(fmt.Sprintf(`UPDATE wide SET c7 = id, c149 = -id WHERE id > %d`, base))
	}
	change := func(e *env, base int) {
		e.srcExec(fmt.Sprintf(`UPDATE "My Schema"."Weird ""Name""" SET "MixedCase" = NULL WHERE "select" %% 3 = 0 AND "select" > %d`, base))
		e.srcExec(`UPDATE dropped SET v = -v WHERE id % 4 = 0`)
		e.srcExec(`UPDATE reorder SET b = NULL, c = 'NaN' WHERE id % 5 = 0`)
		e.srcExec(`DELETE FROM reorder WHERE id % 7 = 0`)
		e.srcExec(`UPDATE parent SET kind = kind || '!' WHERE id % 3 = 0`) // reaches child rows too
		e.srcExec(`DELETE FROM parent WHERE id % 11 = 0`)
		e.srcExec(`UPDATE leafy SET region = 3 - region WHERE id % 5 = 0`) // moves rows between partitions
		e.srcExec(`UPDATE uix SET v = v + 1000, id = id + 1 WHERE id % 3 = 0`)
		e.srcExec(`UPDATE uix SET code = code || 'x' WHERE id % 10 = 1`)
		e.srcExec(`DELETE FROM uix WHERE id % 13 = 0`)
		e.srcExec(`UPDATE dup SET b = 'changed' WHERE ctid = (SELECT ctid FROM dup WHERE a = 1 LIMIT 1)`)
		e.srcExec(`DELETE FROM dup WHERE ctid = (SELECT ctid FROM dup WHERE a = 2 LIMIT 1)`)
		e.srcExec(`UPDATE toasty SET small = small + 1`) // big and bb unchanged TOAST
		e.srcExec(`UPDATE toasty SET id = id + 100000 WHERE id % 2 = 0`)
		e.srcExec(`UPDATE keymove SET id = id + 100000 WHERE id % 4 = 0`)
		e.srcExec(`UPDATE gen SET a = a + 1 WHERE id % 2 = 0`)
		e.srcExec(`UPDATE wide SET c0 = 1 WHERE id % 2 = 0`)
	}
	check := func(e *env) {
		e.assertSame(`"My Schema"."Weird ""Name"""`, `"select"`)
		e.assertSame("dropped", "id")
		e.assertSame("(SELECT id, a, b, c FROM reorder)", "id")
		e.assertSame("ONLY parent", "id")
		e.assertSame("child", "id")
		e.assertSame("leafy", "id, region")
		e.assertSame("uix", "code")
		e.assertSame("dup", "a, b")
		e.assertSame("toasty", "id")
		e.assertSame("keymove", "id")
		e.assertSame("gen", "id")
		e.assertSame("wide", "id")
	}
	tables := []string{`"My Schema".*`, "public.*"}
	for _, mode := range []string{"binary", "text", "create-binary", "create-text"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // own databases
			e := newEnv(t)
			e.srcExec(src)
			e.srcExec(wide)
			if !strings.HasPrefix(mode, "create") {
				e.tgtExec(tgt)
				e.tgtExec(wide)
			}
			load(e, 0)
			cfg := e.config(tables...)
			cfg.Binary = strings.HasSuffix(mode, "binary")
			cfg.CreateTables = strings.HasPrefix(mode, "create")
			e.catchUp(cfg)
			check(e)
			load(e, 1000)
			change(e, 0)
			e.catchUp(cfg)
			check(e)
		})
	}
}
