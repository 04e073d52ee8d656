// Command apirecord writes api/baton.txt, the checked-in record of Baton's public API: every
// exported identifier of the packages an app imports (Packages), one per line with its
// signature, sorted, in the style of Go's api/go1.txt. Run it from the repository root (make api)
// after an intended API change and commit the result; its test fails while the record and the
// code differ, so every API change shows in review. -o - prints the record instead.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("o", "api/baton.txt", "the file to write, or - for standard output")
	flag.Parse()
	lines, err := Record(".", Packages...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apirecord:", err)
		os.Exit(1)
	}
	data := Render(lines)
	if *out == "-" {
		_, err = os.Stdout.Write(data)
	} else if err = os.MkdirAll(filepath.Dir(*out), 0o755); err == nil {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apirecord:", err)
		os.Exit(1)
	}
}
