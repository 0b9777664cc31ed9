package schema

import "strings"

// SplitSchemaPatterns separates the "schema.*" patterns of a --tables list
// (returning their schema names, once each, in order) from the others,
// which name tables. A publication can publish the former FOR TABLES IN
// SCHEMA (PostgreSQL 15+), so that tables created there later are
// published too.
func SplitSchemaPatterns(patterns []string) (schemas, tables []string, err error) {
	seen := map[string]bool{}
	for _, s := range patterns {
		p, err := parsePattern(s)
		if err != nil {
			return nil, nil, err
		}
		if !p.wildcard {
			tables = append(tables, s)
			continue
		}
		if !seen[p.Schema] {
			seen[p.Schema] = true
			schemas = append(schemas, p.Schema)
		}
	}
	return schemas, tables, nil
}

// SplitTableList splits a comma-separated --tables list into its patterns,
// each trimmed of surrounding white space. A comma inside a double-quoted
// identifier is part of it (`"a,b"."t,1",public.x` is two patterns); so is
// a doubled quote (""). An unterminated quote runs to the end of the list,
// as one pattern, which ParseTableName then refuses with its reason.
func SplitTableList(s string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted // "" inside quotes toggles twice: still quoted
		case ',':
			if !quoted {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}
