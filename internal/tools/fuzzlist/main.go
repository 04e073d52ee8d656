// Command fuzzlist prints every fuzz target in the module as "./pkg/path:FuzzName", one per
// line, so `make fuzz` can run each for a bounded time (go test -fuzz takes one target at a time).
package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

var fuzzFunc = regexp.MustCompile(`^func (Fuzz\w*)\(\w+ \*testing\.F\)`)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if m := fuzzFunc.FindStringSubmatch(sc.Text()); m != nil {
				out = append(out, "./"+filepath.ToSlash(filepath.Dir(path))+":"+m[1])
			}
		}
		return sc.Err()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fuzzlist:", err)
		os.Exit(1)
	}
	sort.Strings(out)
	for _, s := range out {
		fmt.Println(strings.Replace(s, "././", "./", 1))
	}
}
