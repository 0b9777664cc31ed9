package capture

import (
	"go/build"
	"strings"
	"testing"
)

// TestSourceSideImports: the source side (capture and what it imports)
// never imports the target side — the two share only the leaf packages
// (change, ddlmsg, pgerr, pgdsn, pgoutput, stats).
func TestSourceSideImports(t *testing.T) {
	const module = "github.com/repstream/repstream/internal/"
	forbidden := []string{"target", "apply", "snapshot", "engine", "install", "schema", "cli"}
	seen := map[string]string{} // package -> the package that imported it
	var walk func(path, from string)
	walk = func(path, from string) {
		if _, ok := seen[path]; ok || !strings.HasPrefix(path, module) {
			return
		}
		seen[path] = from
		pkg, err := build.Import(path, ".", 0)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			walk(imp, path)
		}
	}
	walk(module+"capture", "")
	for _, f := range forbidden {
		if from, ok := seen[module+f]; ok {
			t.Errorf("the source side imports internal/%s (from %s)", f, from)
		}
	}
	if len(seen) < 3 {
		t.Fatalf("walked only %d packages: %v", len(seen), seen)
	}
}
