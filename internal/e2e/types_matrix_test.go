package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// typesMatrixBuiltin has only built-in types: the run applies them in
// binary unless --binary=false. Coverage after PostgreSQL's own
// src/test/subscription/t/002_types.pl: arrays of the common types (also
// multidimensional and with NULLs), ranges and multiranges (empty, infinite
// bounds), bit strings, interval, money, numeric extremes, text with every
// special character, NULL in every column.
const typesMatrixBuiltin = `
CREATE TABLE tm_arrays (id int PRIMARY KEY,
	a_int int[], a_int8 bigint[], a_text text[], a_float float8[], a_num numeric[], a_bool bool[], a_date date[],
	a_ts timestamp[], a_tstz timestamptz[], a_iv interval[], a_uuid uuid[], a_bytea bytea[], a_inet inet[], a_cidr cidr[],
	a_mac macaddr[], a_json json[], a_jsonb jsonb[], a_2d int[][], a_char char(3)[], a_varchar varchar(10)[]);
CREATE TABLE tm_ranges (id int PRIMARY KEY, r_int int4range, r_int8 int8range, r_num numrange, r_ts tsrange, r_tstz tstzrange,
	r_date daterange, m_int int4multirange, m_date datemultirange, a_r int4range[]);
CREATE TABLE tm_scalars (id int PRIMARY KEY, b bit(8), vb varbit(20), iv interval, m money, n numeric, n_scaled numeric(30,10),
	f4 real, f8 float8, t text, c char(5), vc varchar(40), ba bytea, ts timestamp, tstz timestamptz, d date, tm time, tmtz timetz,
	u uuid, j json, jb jsonb, x xml, ip inet, pt point, bx box, oid_ oid, big bigint, small smallint);
`

// typesMatrixUser has user-defined types: the run falls back to text.
const typesMatrixUser = `
CREATE EXTENSION IF NOT EXISTS hstore;
CREATE TYPE tm_mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE tm_comp AS (a int, b text, m tm_mood, ms tm_mood[]);
CREATE TYPE tm_nested AS (c tm_comp, note text);
CREATE DOMAIN tm_pos AS int CHECK (VALUE > 0);
CREATE DOMAIN tm_mail AS text CHECK (VALUE LIKE '%@%');
CREATE TABLE tm_user (id int PRIMARY KEY, m tm_mood, ms tm_mood[], c tm_comp, cs tm_comp[], n tm_nested, p tm_pos, ps tm_pos[],
	mail tm_mail, h hstore, hs hstore[]);
`

// typesMatrixRows inserts rows with ids from base: ordinary values, the
// extremes, and all NULLs.
func typesMatrixRows(base int) []string {
	special := `E'tab\there\nnl\rcr \\ back\\slash ''q'' "dq" \\N ünï 🐘 ' || chr(1)`
	id := func(i int) int { return base + i }
	return []string{
		fmt.Sprintf(`INSERT INTO tm_arrays VALUES (%d,
			'{1,NULL,-2147483648,2147483647}', '{9223372036854775807,NULL}', ARRAY['a', NULL, '', 'x,y', '"q"', E'b\\s', 'NULL', %s],
			'{1.5,NaN,Infinity,-Infinity,-0}', '{0.1,NaN,1e-30,NULL}', '{t,f,NULL}', '{2024-02-29,infinity,-infinity}',
			'{"2024-01-01 00:00:00.000001"}', '{"2024-01-01 00:00:00+05:30",infinity}', '{"1 year 2 mons -3 days 04:05:06.789"}',
			'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', ARRAY['\x00ff'::bytea, NULL, ''::bytea], '{192.168.0.1/24,::1}', '{10.0.0.0/8}',
			'{08:00:2b:01:02:03}', ARRAY['{"k": [1, "x"]}'::json, 'null'], ARRAY['{"k": {"n": 1.50}}'::jsonb], '{{1,2},{3,NULL}}',
			'{"ab ",NULL}', '{"v"}')`, id(1), special),
		fmt.Sprintf(`INSERT INTO tm_arrays (id) VALUES (%d)`, id(2)),
		fmt.Sprintf(`INSERT INTO tm_arrays (id, a_int, a_text, a_2d) VALUES (%d, '{}', '{}', '{}')`, id(3)),
		fmt.Sprintf(`INSERT INTO tm_ranges VALUES (%d, '[1,10)', '(,100]', '[1.5,NaN)'::text::numrange, '[2024-01-01,infinity)', 'empty',
			'[2024-01-01,2024-02-01)', '{[1,3),[5,8)}', '{}', ARRAY['[1,2)'::int4range, 'empty', NULL])`, id(1)),
		fmt.Sprintf(`INSERT INTO tm_ranges (id, r_int) VALUES (%d, 'empty')`, id(2)),
		fmt.Sprintf(`INSERT INTO tm_scalars VALUES (%d, B'10101010', B'101', '-178000000 years', '-92233720368547758.08', 'NaN',
			'-12345678901234567890.0123456789', '-0', '1e308', %s, 'ab', repeat('v', 40), '\x00010203ff', '4713-01-01 BC', 'infinity',
			'5874897-12-31', '24:00:00', '00:00:00+1559', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": "\u00e9\n"}', '{"a": [1e400]}',
			'<a x="1">t &amp; t</a>', '::ffff:1.2.3.4', '(1.5,-2)', '((1,1),(0,0))', 4294967295, -9223372036854775808, -32768)`, id(1), special),
		fmt.Sprintf(`INSERT INTO tm_scalars (id, n, f4, f8, t) VALUES (%d, 'Infinity', 'NaN', '-Infinity', '')`, id(2)),
		fmt.Sprintf(`INSERT INTO tm_scalars (id, n, t) VALUES (%d, '-Infinity', NULL)`, id(3)),
		fmt.Sprintf(`INSERT INTO tm_scalars (id, n) VALUES (%d, repeat('9', 1000)::numeric / 7)`, id(4)),
		fmt.Sprintf(`INSERT INTO tm_scalars (id) VALUES (%d)`, id(5)),
		fmt.Sprintf(`INSERT INTO tm_user VALUES (%d, 'ok', '{sad,happy,NULL}', ROW(1, %s, 'sad', '{ok}'), ARRAY[ROW(2, NULL, NULL, NULL)::tm_comp, NULL],
			ROW(ROW(3, 'x', 'happy', '{}'), 'nested ( , ) "q"'), 5, '{1,2}', 'a@b', 'a=>1, "b c"=>NULL, "\\\"q"=>"x"', ARRAY['k=>v'::hstore])`, id(1), special),
		fmt.Sprintf(`INSERT INTO tm_user (id) VALUES (%d)`, id(2)),
	}
}

// TestTypesMatrix replicates every type of the matrix through the initial
// copy (rows before the first run) and through streaming (inserts, updates
// that change one column and leave a TOASTed one unchanged, deletes): the
// built-in types in binary and in text, the user-defined ones (which make a
// run use text); every table must then equal the source's, compared as text
// row by row.
func TestTypesMatrix(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	builtin := []string{"tm_arrays", "tm_ranges", "tm_scalars", "tm_toast"}
	for _, tc := range []struct {
		name   string
		tables []string
		binary bool
		format string
	}{
		{"builtin binary", builtin, true, "binary"},
		{"builtin text", builtin, false, "text"},
		{"user types", []string{"tm_user"}, true, "text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.both(typesMatrixBuiltin + typesMatrixUser + `
				CREATE TABLE tm_toast (id int PRIMARY KEY, big text, ext text, arr int[], n int);
				ALTER TABLE tm_toast ALTER COLUMN ext SET STORAGE EXTERNAL;`)
			for _, sql := range typesMatrixRows(0) {
				e.srcExec(sql)
			}
			e.srcExec(`INSERT INTO tm_toast SELECT g, repeat(md5(g::text), 400), repeat('e', 5000), array_fill(g, ARRAY[2000]), 0 FROM generate_series(1, 5) g`)
			cfg := e.config(prefixed("public.", tc.tables)...)
			cfg.Binary = tc.binary
			e.catchUp(cfg)
			e.assertSameText(tc.tables...)

			for _, sql := range typesMatrixRows(100) {
				e.srcExec(sql)
			}
			e.srcExec(`UPDATE tm_toast SET n = n + 1`) // big, ext, arr unchanged TOAST
			e.srcExec(`UPDATE tm_scalars SET t = 'changed', iv = iv / 2 WHERE id IN (1, 101)`)
			e.srcExec(`UPDATE tm_arrays SET a_int = a_int || 7 WHERE id = 1`)
			e.srcExec(`UPDATE tm_user SET m = 'happy', c.b = 'set' WHERE id = 1`)
			e.srcExec(`UPDATE tm_ranges SET r_int = '[5,6]' WHERE id = 101`)
			e.srcExec(`DELETE FROM tm_scalars WHERE id = 3`)
			e.srcExec(`DELETE FROM tm_user WHERE id = 102`)
			reg := e.catchUp(cfg)
			e.assertSameText(tc.tables...)
			if got := captureInfo(reg, "format"); got != tc.format {
				t.Errorf("values travelled as %q, want %q", got, tc.format)
			}
		})
	}
}

func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

// assertSameText compares tables row by row as text (a float -0 equals 0
// under =, but not as text), ordered by id.
func (e *env) assertSameText(tables ...string) {
	e.t.Helper()
	for _, tb := range tables {
		q := "SELECT r__::text FROM " + tb + " r__ ORDER BY id"
		src, tgt := rowsText(e.t, e.Src, q), rowsText(e.t, e.Tgt, q)
		if strings.Join(src, "\n") != strings.Join(tgt, "\n") {
			e.t.Errorf("%s differs:\nsource %q\ntarget %q", tb, src, tgt)
		}
	}
}

// rowsText returns the first column of every row of q.
func rowsText(t *testing.T, conn *pgx.Conn, q string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}
