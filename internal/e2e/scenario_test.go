package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/config"
)

// TestSchemaChangesAndConflictsTogether is the schema-change and conflict
// scenario as a new user tries it: one engine started once with --tables
// 'public.*' --create-tables --on-error park; the source runs ADD COLUMN
// with a default, RENAME COLUMN, ALTER COLUMN TYPE int -> bigint, DROP
// COLUMN and CREATE TABLE between writes; on the target a row is inserted
// that the source will insert too, and a row is deleted that the source
// will update. Later transactions go on; `errors list` shows both parked
// transactions with table and key; once the target rows are mended,
// `errors retry --all` applies them and the queue is empty; every table
// then equals the source, columns and rows.
func TestSchemaChangesAndConflictsTogether(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE items (id int PRIMARY KEY, name text, qty int, obsolete text)`)
	e.srcExec(`INSERT INTO items SELECT g, 'item' || g, g, 'x' FROM generate_series(1, 100) g`)
	cfg := e.config("public.*")
	cfg.CreateTables = true
	cfg.OnError = config.OnErrorPark
	e.catchUp(cfg) // creates items on the target and copies it
	stop := e.startOnce(cfg)
	defer func() {
		if stop != nil {
			_ = stop()
		}
	}()
	e.waitStreaming(cfg.Slot)

	e.srcExec(`INSERT INTO items VALUES (101, 'before', 1, 'x')`)
	e.srcExec(`ALTER TABLE items ADD COLUMN price numeric(10,2) DEFAULT 9.99`)
	e.srcExec(`INSERT INTO items (id, name, qty, price) VALUES (102, 'priced', 2, 1.50)`)
	e.srcExec(`ALTER TABLE items RENAME COLUMN name TO title`)
	e.srcExec(`UPDATE items SET title = 'renamed' WHERE id = 3`)
	e.srcExec(`ALTER TABLE items ALTER COLUMN qty TYPE bigint`)
	e.srcExec(`UPDATE items SET qty = 9000000000 WHERE id = 4`)
	e.srcExec(`ALTER TABLE items DROP COLUMN obsolete`)
	e.srcExec(`INSERT INTO items (id, title, qty) VALUES (103, 'after drop', 3)`)
	// A new table reaches the target when the publication is FOR TABLES IN
	// SCHEMA (PostgreSQL 15+; on 14 a new table needs `tables add`).
	schemaPubs := e.srcMajor() >= 15
	if schemaPubs {
		e.srcExec(`CREATE TABLE orders (id int PRIMARY KEY, item int, at timestamptz DEFAULT now())`)
		e.srcExec(`INSERT INTO orders (id, item) SELECT g, g FROM generate_series(1, 20) g`)
	}
	// Conflicts made on the target: a row the source will insert too, and
	// a row deleted that the source will update.
	e.waitCaughtUp(cfg.Slot, time.Minute)
	e.tgtExec(`INSERT INTO items (id, title, qty) VALUES (500, 'target only', 0)`)
	e.tgtExec(`DELETE FROM items WHERE id = 7`)
	e.srcExec(`INSERT INTO items (id, title, qty) VALUES (500, 'from the source', 5)`)
	e.srcExec(`UPDATE items SET qty = qty + 1000 WHERE id = 7`)
	// Later transactions go on.
	e.srcExec(`INSERT INTO items (id, title, qty) SELECT g, 'later', g FROM generate_series(600, 650) g`)
	if schemaPubs {
		e.srcExec(`INSERT INTO orders (id, item) VALUES (21, 600)`)
	}
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("the engine stopped with an error: %v", err)
	}
	stop = nil

	entries := e.parked(cfg)
	if len(entries) != 2 {
		t.Fatalf("%d parked transactions, want 2: %+v", len(entries), entries)
	}
	list := e.errorsCLI(cfg, 0, "list")
	for _, s := range []string{"public.items", "insert_exists", "(id)=(500)", "update_missing", "(id)=(7)"} {
		if !strings.Contains(list, s) {
			t.Errorf("errors list does not show %q:\n%s", s, list)
		}
	}
	if schemaPubs {
		e.assertSameTable("public.orders", "id")
	}
	e.assertSame("(SELECT * FROM items WHERE id NOT IN (7, 500))", "id")

	e.tgtExec(`DELETE FROM items WHERE id = 500`)
	e.tgtExec(`INSERT INTO items (id, title, qty, price) VALUES (7, 'item7', 7, 9.99)`)
	out := e.errorsCLI(cfg, 0, "retry", "--all")
	if strings.Count(out, "retried: applied") != 2 {
		t.Fatalf("errors retry --all: %s", out)
	}
	if n := len(e.parked(cfg)); n != 0 {
		t.Fatalf("%d transactions still parked after retry --all", n)
	}
	e.catchUp(cfg)
	e.assertSameTable("public.items", "id")
	if schemaPubs {
		e.assertSameTable("public.orders", "id")
	}
}
