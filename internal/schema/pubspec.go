package schema

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
