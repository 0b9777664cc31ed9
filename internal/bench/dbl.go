package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
)

func (r *runner) runDBL(ctx context.Context, rep *Report, specs []runSpec) error {
	return errors.New("dbl: not implemented yet")
}

func writeDBLMarkdown(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "## DBL\n\n")
}
