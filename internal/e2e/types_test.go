package e2e

import (
	"fmt"
	"testing"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/stats"
)

// applyModes are the apply settings every core scenario runs under.
var applyModes = []struct {
	name        string
	parallelism int
	order       config.CommitOrder
}{
	{"p1", 1, "full"},
	{"p4-full", 4, "full"},
	{"p4-dependent", 4, "dependent"},
}

// schemaSQL has only built-in types, so values travel in binary; moodSQL
// turns column m into an enum, which makes the run fall back to text.
const schemaSQL = `
CREATE TABLE all_types (
	id int PRIMARY KEY, b bigint, n numeric(20,5), f float8, r real, t text, v varchar(50),
	j jsonb, ai int[], at text[], by bytea, ts timestamptz, d date, u uuid, ok bool, m text,
	iv interval, js json, pt point, gen int GENERATED ALWAYS AS (id * 2) STORED);
CREATE TABLE big (id int PRIMARY KEY, payload text, note text);
CREATE TABLE nokey (a int, b text, j json, p point);
ALTER TABLE nokey REPLICA IDENTITY FULL;
CREATE TABLE kv (k int PRIMARY KEY, v int);
CREATE TABLE trunc (id int PRIMARY KEY);
`

// allTables lists every table of schemaSQL with its ordering for checksums.
var allTables = [][2]string{
	{"all_types", "id"}, {"big", "id"}, {"nokey", "a, b"}, {"kv", "k"}, {"trunc", "id"},
}

// TestReplicateTypesAndChanges covers the types in common use, NULLs, TOAST,
// key changes, unchanged TOAST columns, deletes, truncate, multi-table,
// rolled-back transactions and subtransactions, and a keyless table — first
// through the initial copy, then through the stream.
func TestReplicateTypesAndChanges(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	modes := append(applyModes[:len(applyModes):len(applyModes)], struct {
		name        string
		parallelism int
		order       config.CommitOrder
	}{"p4-dependent-text", 4, "dependent"})
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel() // own databases
			e := newEnv(t)
			e.both(schemaSQL)
			wantFormat := "binary"
			if mode.name == "p4-dependent-text" {
				e.both(moodSQL)
				wantFormat = "text"
			}
			// Rows that exist before the slot: the initial copy takes them.
			e.srcExec(`INSERT INTO all_types (id, b, n, f, r, t, v, j, ai, at, by, ts, d, u, ok, m, iv)
				SELECT g, g::bigint * 1000000000, g / 7.0, g * 1.5, g / 3.0, 'row ' || g, 'v' || g, jsonb_build_object('g', g, 'a', jsonb_build_array(1, 'x')),
				ARRAY[g, g + 1], ARRAY['a' || g, NULL], decode(md5(g::text), 'hex'), '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 minute',
				'2024-01-01'::date + g, md5(g::text)::uuid, g % 2 = 0, (ARRAY['sad','ok','happy'])[g % 3 + 1], g * interval '1 second'
				FROM generate_series(1, 200) g`)
			e.srcExec(`INSERT INTO big SELECT g, (SELECT string_agg(md5(random()::text || i), '') FROM generate_series(1, 3000) i), 'n' FROM generate_series(1, 5) g`)
			e.srcExec(`INSERT INTO nokey SELECT g % 10, 'b' || g FROM generate_series(1, 30) g`)
			e.srcExec(`INSERT INTO kv SELECT g, g FROM generate_series(1, 100) g`)
			cfg := e.config("public.*")
			cfg.ApplyParallelism, cfg.CommitOrder = mode.parallelism, mode.order
			e.catchUp(cfg)
			for _, tb := range allTables {
				e.assertSame(tb[0], tb[1])
			}

			// Now the stream.
			e.srcExec(`INSERT INTO all_types (id, t, v, j, at, by) VALUES
				(1001, E'tab\there\nnewline \\ backslash ''quote'' "dq" ünïcödé ☃', 'x', '{"k": "v\\n"}', ARRAY[E'a\tb', 'c,d', '"q"', NULL], E'\\x00ff'),
				(1002, '', '', 'null', '{}', ''),
				(1003, NULL, NULL, NULL, NULL, NULL)`)
			e.srcExec(`INSERT INTO all_types (id, f, r) VALUES (1004, 'NaN', 'Infinity'), (1005, 1e-300, -0.0)`)
			e.srcExec(`UPDATE all_types SET t = t || ' updated', n = n * 2 WHERE id % 5 = 0`)
			e.srcExec(`UPDATE kv SET k = k + 1000 WHERE k <= 10`)           // key changes
			e.srcExec(`UPDATE big SET note = 'changed' WHERE id IN (1, 2)`) // payload stays TOASTed, unchanged
			e.srcExec(`UPDATE big SET payload = payload || 'x' WHERE id = 3`)
			e.srcExec(`DELETE FROM all_types WHERE id % 7 = 0`)
			e.srcExec(`DELETE FROM big WHERE id = 5`)
			e.srcExec(`BEGIN; INSERT INTO kv VALUES (2000, 1); UPDATE all_types SET ok = NOT ok WHERE id = 1; DELETE FROM big WHERE id = 4; COMMIT`)
			e.srcExec(`BEGIN; INSERT INTO kv VALUES (3000, 1); UPDATE kv SET v = -1; ROLLBACK`)
			e.srcExec(`BEGIN; INSERT INTO kv VALUES (4000, 1); SAVEPOINT s1; INSERT INTO kv VALUES (4001, 1); UPDATE kv SET v = 99 WHERE k = 20;
				ROLLBACK TO SAVEPOINT s1; INSERT INTO kv VALUES (4002, 2); SAVEPOINT s2; DELETE FROM kv WHERE k = 21; RELEASE SAVEPOINT s2; COMMIT`)
			e.srcExec(`INSERT INTO nokey VALUES (100, 'dup'), (100, 'dup'), (101, NULL)`)
			e.srcExec(`UPDATE nokey SET b = 'one of the dups' WHERE ctid = (SELECT ctid FROM nokey WHERE a = 100 LIMIT 1)`)
			e.srcExec(`DELETE FROM nokey WHERE a = 3`)
			e.srcExec(`UPDATE nokey SET b = 'was null' WHERE a = 101`)
			// FULL matching on types without equality (compared as text).
			e.srcExec(`UPDATE nokey SET j = '{"x": [1, 2]}', p = '(1,2)' WHERE a = 4`)
			e.srcExec(`UPDATE nokey SET b = 'found by json and point' WHERE a = 4`)
			e.srcExec(`DELETE FROM nokey WHERE a = 4 AND b = 'found by json and point' AND ctid = (SELECT min(ctid) FROM nokey WHERE a = 4)`)
			e.srcExec(`INSERT INTO trunc SELECT generate_series(1, 50)`)
			e.srcExec(`TRUNCATE trunc`)
			e.srcExec(`INSERT INTO trunc SELECT generate_series(100, 110)`)
			for i := 0; i < 20; i++ { // many small transactions on the same keys
				e.srcExec(fmt.Sprintf(`UPDATE kv SET v = v + %d WHERE k BETWEEN 30 AND 40`, i))
				e.srcExec(fmt.Sprintf(`INSERT INTO kv VALUES (%d, %d)`, 5000+i, i))
			}
			e.srcExec(`INSERT INTO all_types (id, js, pt, m) VALUES (1006, '{"a": [1, 2]}', '(1.5,2)', 'happy')`)
			e.srcExec(`UPDATE all_types SET js = '{"b": 1}', pt = '(3,4)', m = 'sad' WHERE id = 1006`)
			reg := e.catchUp(cfg)
			for _, tb := range allTables {
				e.assertSame(tb[0], tb[1])
			}
			if got := captureInfo(reg, "format"); got != wantFormat {
				t.Errorf("values travelled as %q, want %q", got, wantFormat)
			}
		})
	}
}

// moodSQL makes all_types.m an enum (a type that is not built in).
const moodSQL = `CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
ALTER TABLE all_types ALTER COLUMN m TYPE mood USING m::mood;
CREATE CAST (text AS mood) WITH INOUT AS ASSIGNMENT;`

// captureInfo returns an info fact of the capture component.
func captureInfo(reg *stats.Registry, key string) string {
	for _, c := range reg.Snapshot().Components {
		if c.Name == "capture" {
			return c.Info[key]
		}
	}
	return ""
}
