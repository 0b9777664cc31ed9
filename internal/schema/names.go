package schema

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/repstream/repstream/internal/change"
)

// TableName is a schema-qualified table name, unquoted (as stored in the
// catalog).
type TableName struct{ Schema, Name string }

// String returns schema.name unquoted, for messages.
func (n TableName) String() string { return n.Schema + "." + n.Name }

// Compare orders names by schema, then name (bytewise): for slices.SortFunc.
func (n TableName) Compare(o TableName) int {
	return cmp.Or(cmp.Compare(n.Schema, o.Schema), cmp.Compare(n.Name, o.Name))
}

// Quoted returns "schema"."name", safe to paste into SQL.
func (n TableName) Quoted() string {
	return change.QuoteIdent(n.Schema) + "." + change.QuoteIdent(n.Name)
}

// ParseTableName parses "schema.table" or "table" (schema public) with SQL
// identifier rules: unquoted parts are folded to lower case (ASCII letters, as PostgreSQL does), double-quoted
// parts are taken literally ("" is a quote). `"My Schema"."Order.Items"` is
// valid.
func ParseTableName(s string) (TableName, error) {
	n, err := parsePattern(s)
	if err != nil {
		return TableName{}, err
	}
	if n.wildcard {
		return TableName{}, fmt.Errorf("parse table name %q: wildcard not allowed here", s)
	}
	return n.TableName, nil
}

// pattern is a parsed table pattern: a name, or schema.* when wildcard.
type pattern struct {
	TableName
	wildcard bool
}

func parsePattern(s string) (pattern, error) {
	var parts []string
	var quoted []bool
	rest := strings.TrimSpace(s)
	for {
		part, q, r, err := parseIdent(rest)
		if err != nil {
			return pattern{}, fmt.Errorf("parse table name %q: %w", s, err)
		}
		parts = append(parts, part)
		quoted = append(quoted, q)
		if r == "" {
			break
		}
		if r[0] != '.' {
			return pattern{}, fmt.Errorf("parse table name %q: unexpected %q", s, r)
		}
		rest = r[1:]
	}
	var p pattern
	switch len(parts) {
	case 1:
		p.Schema, p.Name = "public", parts[0]
	case 2:
		p.Schema, p.Name = parts[0], parts[1]
	default:
		return pattern{}, fmt.Errorf("parse table name %q: want schema.table", s)
	}
	if p.Schema == "*" && !quoted[0] {
		return pattern{}, fmt.Errorf("parse table name %q: wildcard schema not supported", s)
	}
	p.wildcard = p.Name == "*" && !quoted[len(quoted)-1]
	return p, nil
}

// parseIdent reads one identifier from the front of s: "quoted" or a run of
// characters up to the next dot. It returns the identifier, whether it was
// quoted, and the rest of s.
func parseIdent(s string) (ident string, quoted bool, rest string, err error) {
	if s == "" {
		return "", false, "", fmt.Errorf("empty identifier")
	}
	if s[0] == '"' {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != '"' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == '"' {
				b.WriteByte('"')
				i++
				continue
			}
			if b.Len() == 0 {
				return "", false, "", fmt.Errorf("empty quoted identifier")
			}
			return b.String(), true, s[i+1:], nil
		}
		return "", false, "", fmt.Errorf("unterminated quoted identifier")
	}
	end := strings.IndexAny(s, `."`)
	if end < 0 {
		end = len(s)
	}
	id := s[:end]
	if id == "" {
		return "", false, "", fmt.Errorf("empty identifier")
	}
	if strings.ContainsAny(id, " \t\n") {
		return "", false, "", fmt.Errorf("identifier %q contains white space (quote it)", id)
	}
	return foldASCII(id), false, s[end:], nil
}

// foldASCII lower-cases ASCII letters only, as PostgreSQL folds unquoted
// identifiers in UTF-8 databases.
func foldASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

const resolveQuery = `
SELECT n.nspname::text, c.relname::text, c.relispartition, c.relpersistence = 'u'
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname = $1 AND ($2 OR c.relname = $3)
ORDER BY 1, 2`

// ResolveTables expands table patterns into the tables they name, sorted and
// without duplicates. A pattern is "schema.table", "table" (in schema public)
// or "schema.*" (every ordinary and partitioned table of the schema, except
// partitions: their partitioned root covers them; name a partition explicitly
// to get it). Only ordinary and partitioned tables match. A pattern that
// matches nothing is an error naming it. UNLOGGED tables write no WAL, so
// logical decoding never sees their changes: "schema.*" leaves them out,
// and naming one is an error that says so.
func ResolveTables(ctx context.Context, q Querier, patterns []string) ([]TableName, error) {
	seen := make(map[TableName]bool)
	var out []TableName
	for _, s := range patterns {
		p, err := parsePattern(s)
		if err != nil {
			return nil, err
		}
		rows, err := q.Query(ctx, resolveQuery, p.Schema, p.wildcard, p.Name)
		if err != nil {
			return nil, fmt.Errorf("resolve table pattern %q: %w", s, err)
		}
		matched := 0
		for rows.Next() {
			var n TableName
			var isPartition, unlogged bool
			if err := rows.Scan(&n.Schema, &n.Name, &isPartition, &unlogged); err != nil {
				rows.Close()
				return nil, fmt.Errorf("resolve table pattern %q: %w", s, err)
			}
			if p.wildcard && (isPartition || unlogged) {
				continue
			}
			if unlogged {
				rows.Close()
				return nil, fmt.Errorf("table %s is UNLOGGED: its changes are not in the WAL, so they cannot be replicated (ALTER TABLE %s SET LOGGED)", n, n.Quoted())
			}
			matched++
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("resolve table pattern %q: %w", s, err)
		}
		if matched == 0 {
			return nil, fmt.Errorf("table pattern %q matches no table", s)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Schema != out[j].Schema {
			return out[i].Schema < out[j].Schema
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
