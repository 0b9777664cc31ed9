package schema

import (
	"strconv"
	"strings"
)

// SilentConversion says how storing a value of type from in a column of
// type to changes it without an error ("" if it does not, or if the target
// rejects what it cannot hold): a time zone dropped or assumed, digits or
// fractional seconds rounded away, the time of day or an interval's
// smaller parts dropped, trailing spaces lost (of any text that may end in
// them), a value longer than name holds cut (any type's text), a JSON text
// normalised, a MAC address widened.
// Types are format_type's text, modifiers included; arrays of the same
// depth compare their elements. Found by storing such values in such
// columns on PostgreSQL 15 (TestSilentConversion lists them).
func SilentConversion(from, to string) string {
	f, t := splitType(from), splitType(to)
	if t.name == "name" && f.name != "name" && (t.dims == 0 || t.dims == f.dims) && !(f.dims == t.dims && f.shortText()) {
		// name takes any value (a string type), as its text; an array
		// of names an array's elements.
		return "values longer than 63 bytes are cut (name holds 63, and cuts without an error)"
	}
	if f.dims != t.dims {
		return "" // another kind of type: Incompatible's category rule
	}
	if fs, ok := rangeSubtypes[f.name]; ok {
		if ts, ok := rangeSubtypes[t.name]; ok && fs != ts {
			// A range's bounds convert as its subtype's values do.
			if why := SilentConversion(fs, ts); why != "" {
				return "the range's bounds change: " + why
			}
		}
		return ""
	}
	zoned := map[string]string{"timestamp with time zone": "timestamp without time zone", "time with time zone": "time without time zone"}
	for z, plain := range zoned {
		if f.name == z && t.name == plain {
			return "the time zone is dropped"
		}
		if f.name == plain && t.name == z {
			return "the target assumes its session's time zone"
		}
	}
	if f.name == "date" && t.name == "timestamp with time zone" {
		return "the target assumes its session's time zone for the date's midnight"
	}
	if strings.HasPrefix(f.name, "timestamp ") && (t.name == "date" || strings.HasPrefix(t.name, "time ")) {
		if t.name == "date" {
			return "the time of day is dropped"
		}
		return "the date is dropped"
	}
	if fp, ok := f.fractionDigits(); ok {
		if tp, ok := t.fractionDigits(); ok && tp < fp {
			return "fractional seconds beyond the target's precision are rounded away"
		}
	}
	if fl, ok := f.intervalLowest(); ok {
		if tl, ok := t.intervalLowest(); ok && tl < fl {
			return "the parts of an interval smaller than the target's fields allow are dropped"
		}
	}
	floats := map[string]int{"real": 6, "double precision": 15}
	exact := map[string]bool{"numeric": true, "bigint": true, "integer": true, "double precision": true}
	if digits, ok := floats[t.name]; ok && exact[f.name] && f.name != t.name && !(f.name == "integer" && digits >= 15) {
		return "digits beyond the target's precision are rounded away"
	}
	fractional := f.name == "numeric" || f.name == "real" || f.name == "double precision"
	integral := f.name == "smallint" || f.name == "integer" || f.name == "bigint"
	if t.name == "numeric" && (fractional || integral) && from != to {
		// A scale may be negative (PostgreSQL 15+: numeric(10,-2) rounds
		// to hundreds), which rounds integers too.
		if ts, bounded := t.numericScale(); bounded {
			fs, fbounded := 0, integral
			if f.name == "numeric" {
				fs, fbounded = f.numericScale()
			}
			if !fbounded || ts < fs {
				return "digits beyond the target's scale are rounded away"
			}
		}
	}
	if t.name == "money" && fractional {
		return "digits beyond the currency's are rounded away"
	}
	if t.name == "character" && t.mods != "" && f.name != "character" && f.name != "bpchar" && f.spaced() {
		return "trailing spaces are not kept (character(n) pads values with spaces, and ignores them)"
	}
	if t.name == "character varying" && t.mods != "" && f.spaced() {
		tn, _ := strconv.Atoi(t.mods)
		fn, err := strconv.Atoi(f.mods)
		if err != nil || fn > tn || f.name != "character varying" && f.name != "character" {
			// A longer value is refused, unless what passes the length
			// is spaces.
			return "trailing spaces beyond the target's length are cut (character varying(n) drops them without an error)"
		}
	}
	if f.name == "macaddr" && t.name == "macaddr8" {
		return "a 6-byte address is stored as an 8-byte one (FF:FE inserted in its middle)"
	}
	if f.name == "json" && t.name == "jsonb" {
		return "jsonb keeps neither the text's form (spaces, key order) nor a repeated key's earlier values"
	}
	return ""
}

// spaced: the text of the type (of an array's elements) may end in spaces
// (a string type's, a JSON or XML text's), which character(n) and
// character varying(n) drop.
func (p typeParts) spaced() bool {
	switch p.name {
	case "text", "character varying", "character", "bpchar", "name", "json", "xml", "citext":
		return true
	}
	return strings.HasSuffix(p.name, ".citext")
}

// shortText: the type's text (an array's element's) is never longer than 63 bytes (name's
// length).
func (p typeParts) shortText() bool {
	switch p.name {
	case "\"char\"", "boolean", "smallint", "integer", "bigint", "oid", "xid", "xid8", "cid", "uuid", "date", "real", "double precision",
		"money", "macaddr", "macaddr8", "inet", "cidr", "pg_lsn", "time without time zone", "time with time zone",
		"timestamp without time zone", "timestamp with time zone":
		return true
	case "character varying", "character":
		n, err := strconv.Atoi(p.mods)
		return err == nil && n*4 <= 63 // 4 bytes a character at most
	}
	return false
}

// rangeSubtypes are the built-in range and multirange types' subtypes.
var rangeSubtypes = map[string]string{
	"int4range": "integer", "int8range": "bigint", "numrange": "numeric",
	"tsrange": "timestamp without time zone", "tstzrange": "timestamp with time zone", "daterange": "date",
	"int4multirange": "integer", "int8multirange": "bigint", "nummultirange": "numeric",
	"tsmultirange": "timestamp without time zone", "tstzmultirange": "timestamp with time zone", "datemultirange": "date",
}

// typeParts is format_type's text taken apart: "timestamp(3) with time
// zone[]" is name "timestamp with time zone", mods "3", dims 1.
type typeParts struct {
	name string
	mods string
	dims int
}

func splitType(t string) typeParts {
	var p typeParts
	for strings.HasSuffix(t, "[]") {
		p.dims++
		t = t[:len(t)-2]
	}
	if open := strings.IndexByte(t, '('); open >= 0 && !strings.Contains(t, `"`) {
		if n := strings.IndexByte(t[open:], ')'); n > 0 {
			p.mods = t[open+1 : open+n]
			t = strings.TrimSpace(t[:open]) + t[open+n+1:]
		}
	}
	p.name = t
	return p
}

// fractionDigits is the precision of a type holding fractional seconds
// (6, the most, without a modifier); ok is false for other types, and
// for an interval whose fields end above seconds.
func (p typeParts) fractionDigits() (int, bool) {
	switch {
	case strings.HasPrefix(p.name, "timestamp "), strings.HasPrefix(p.name, "time "), p.name == "interval", strings.HasPrefix(p.name, "interval "):
	default:
		return 0, false
	}
	if strings.HasPrefix(p.name, "interval ") && !strings.HasSuffix(p.name, " second") {
		return 0, false // "interval day": no seconds kept
	}
	if p.mods == "" {
		return 6, true
	}
	n, err := strconv.Atoi(p.mods)
	if err != nil {
		return 0, false
	}
	return n, true
}

// intervalFields ranks an interval's fields, largest first.
var intervalFields = []string{"year", "month", "day", "hour", "minute", "second"}

// intervalLowest is the rank in intervalFields of the smallest field an
// interval type keeps ("interval day to hour": hour; a plain interval:
// second); ok is false for other types.
func (p typeParts) intervalLowest() (int, bool) {
	if p.name == "interval" {
		return len(intervalFields) - 1, true
	}
	fields, ok := strings.CutPrefix(p.name, "interval ")
	if !ok {
		return 0, false
	}
	words := strings.Fields(fields)
	for i, f := range intervalFields {
		if len(words) > 0 && words[len(words)-1] == f {
			return i, true
		}
	}
	return 0, false
}

// numericScale is the scale of "numeric(p,s)" (0 for "numeric(p)"; it
// may be negative), bounded false for an unconstrained numeric.
func (p typeParts) numericScale() (scale int, bounded bool) {
	if p.mods == "" {
		return 0, false
	}
	_, sc, ok := strings.Cut(p.mods, ",")
	if !ok {
		return 0, true
	}
	n, err := strconv.Atoi(strings.TrimSpace(sc))
	if err != nil {
		return 0, false
	}
	return n, true
}
