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
