package e2e

import (
	"context"
	"fmt"
	"testing"
)

// TestSourceOutputSettings: the source's own DateStyle, IntervalStyle,
// extra_float_digits and bytea_output (set for its database, so the
// walsender and the copy sessions inherit them) do not change the values
// the target gets, in text and binary.
func TestSourceOutputSettings(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, binary := range []bool{false, true} {
		t.Run(fmt.Sprintf("binary=%v", binary), func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(fmt.Sprintf(`ALTER DATABASE %s SET datestyle = 'SQL, DMY'`, e.srcDB))
			e.srcExec(fmt.Sprintf(`ALTER DATABASE %s SET intervalstyle = 'sql_standard'`, e.srcDB))
			e.srcExec(fmt.Sprintf(`ALTER DATABASE %s SET extra_float_digits = -3`, e.srcDB))
			e.srcExec(fmt.Sprintf(`ALTER DATABASE %s SET bytea_output = 'escape'`, e.srcDB))
			e.srcExec(fmt.Sprintf(`ALTER DATABASE %s SET timezone = 'Asia/Kolkata'`, e.srcDB))
			e.both(`CREATE TABLE g (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz, iv interval, f4 real, f8 float8, b bytea, da date[])`)
			// Made by --create-tables: its default is deparsed on the source.
			e.srcExec(`CREATE TABLE gd (id int PRIMARY KEY, d date DEFAULT date '2026-11-05', iv interval DEFAULT '1 day 02:00')`)
			ins := func(base int) {
				e.srcExec(fmt.Sprintf(`INSERT INTO g SELECT g, date '2026-11-05' + g, timestamp '2026-03-04 05:06:07.891' + g * interval '1 day',
					timestamptz '2026-03-04 05:06:07.891+00' + g * interval '1 hour', interval '1 year 2 mons -3 days 04:05:06.7' * g,
					0.1::real * g + 1e-7, 0.1::float8 * g + 1e-15, decode('00ff5c27' || lpad(to_hex(g), 8, '0'), 'hex'),
					ARRAY[date '2026-01-02' + g, NULL] FROM generate_series(%d, %d) g`, base+1, base+100))
			}
			ins(0)
			cfg := e.config("public.g", "public.gd")
			cfg.Binary = binary
			cfg.CreateTables = true
			e.catchUp(cfg)
			e.assertSame("g", "id")
			e.srcExec(`INSERT INTO gd (id) VALUES (1)`)
			e.tgtExec(`INSERT INTO gd (id) VALUES (2)`)
			var sd, td string
			if err := e.Src.QueryRow(context.Background(), `SELECT d::text || ' ' || iv::text FROM gd`).Scan(&sd); err != nil {
				t.Fatal(err)
			}
			if err := e.Tgt.QueryRow(context.Background(), `SELECT d::text || ' ' || iv::text FROM gd WHERE id = 2`).Scan(&td); err != nil {
				t.Fatal(err)
			}
			if sd != td {
				t.Fatalf("--create-tables default: source gives %q, the target table made from it %q", sd, td)
			}
			e.srcExec(`DELETE FROM gd`)
			e.tgtExec(`DELETE FROM gd WHERE id = 2`)
			ins(1000)
			e.srcExec(`UPDATE g SET d = d + 1, iv = -iv, f8 = f8 / 3 WHERE id % 2 = 0`)
			e.catchUp(cfg)
			e.assertSame("g", "id")
		})
	}
}

// TestTargetInputSettings: settings of the target database that change
// how text is read back (a database's owner may set them for every
// session there) change no value: array_nulls off read an array's NULL
// element as the string "NULL" (text values: the copy, inserts, updates),
// xmloption document refused an XML fragment, standard_conforming_strings
// off read the backslashes of a default repstream wrote (its ADD COLUMN's
// value for the existing rows, the column's default) as escapes; with
// DateStyle, IntervalStyle and TimeZone of their own too.
func TestTargetInputSettings(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, binary := range []bool{false, true} {
		t.Run(fmt.Sprintf("binary=%v", binary), func(t *testing.T) {
			e := newEnv(t)
			for _, s := range []string{`array_nulls = off`, `xmloption = document`, `standard_conforming_strings = off`,
				`datestyle = 'SQL, DMY'`, `intervalstyle = 'sql_standard'`, `timezone = 'Pacific/Kiritimati'`} {
				e.tgtExec(fmt.Sprintf(`ALTER DATABASE %s SET %s`, e.tgtDB, s))
			}
			e.srcExec(`CREATE TABLE a (id int PRIMARY KEY, ta text[], x xml, d date, iv interval, s text DEFAULT 'c:\temp')`)
			ins := func(base int) {
				e.srcExec(fmt.Sprintf(`INSERT INTO a (id, ta, x, d, iv) VALUES (%[1]d + 1, '{NULL,"NULL",a}', 'frag<a/>text', '2024-02-03', '-1 day 02:00'),
					(%[1]d + 2, ARRAY[NULL, 'x\y'], NULL, '2024-12-01', '3 mons -4 days')`, base))
			}
			ins(0)
			cfg := e.config("public.a")
			cfg.Binary = binary
			cfg.CreateTables = true
			e.catchUp(cfg)
			ins(100)
			e.srcExec(`UPDATE a SET ta = ARRAY['z', NULL] WHERE id = 1`)
			e.srcExec(`ALTER TABLE a ADD COLUMN s2 text DEFAULT 'c:\new\table'`)
			ins(200)
			e.catchUp(cfg)
			e.assertSame("a", "id")
			e.srcExec(`INSERT INTO a (id) VALUES (1000)`)
			e.tgtExec(`INSERT INTO a (id) VALUES (1000)`)
			var sv, tv string
			if err := e.Src.QueryRow(t.Context(), `SELECT s || '|' || s2 FROM a WHERE id = 1000`).Scan(&sv); err != nil {
				t.Fatal(err)
			}
			if err := e.Tgt.QueryRow(t.Context(), `SELECT s || '|' || s2 FROM a WHERE id = 1000`).Scan(&tv); err != nil {
				t.Fatal(err)
			}
			if sv != tv {
				t.Errorf("the target's defaults give %q, the source's %q", tv, sv)
			}
		})
	}
}
