// Command baton writes and maintains Baton apps.
//
//	go run github.com/batonfn/baton/cmd/baton@<version> init <dir> -module <path> [-name <name>]
//	go tool baton sync     rewrite the generated files (after go get -u), never a file you edited
//	go tool baton check    exit 1 when a generated file differs from what the pinned Baton writes
//
// init writes a new app: go.mod requiring this version of Baton (cmd/baton and cmd/devhost
// pinned by its tool directive), main.go, an example job with its batontest test, host.json and
// the function folders, local.settings.example.json, azure.yaml, infra/, scripts/, a Makefile
// (make test, make demo), a README and package.json/package-lock.json pinning Azurite; then runs
// go mod tidy there. .baton/generated.json lists the generated files (see package
// internal/scaffold for which are generated and which are yours).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"

	"github.com/batonfn/baton/internal/tools/scaffold"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command: its exit code (0 ok, 1 check found drift or a command failed, 2 usage).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "init":
		err = initCmd(ctx, args[1:], stdout)
	case "sync":
		err = syncCmd(args[1:], stdout)
	case "check":
		var drifted bool
		drifted, err = checkCmd(args[1:], stdout)
		if err == nil && drifted {
			return 1
		}
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		usage(stderr)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "baton:", err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `baton — write and maintain a Baton app

  baton init <dir> -module <path> [-name <name>] [-replace <baton checkout>]
  baton sync  [-C dir]   rewrite the generated files you have not edited
  baton check [-C dir]   exit 1 when a generated file differs from what this Baton writes
`)
}

// version is the version of Baton this command was built from: the main module's for
// `go run …/cmd/baton@v`, the required module's for `go tool baton`; "(devel)" from a checkout.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if info.Main.Path == scaffold.BatonModule && info.Main.Version != scaffold.PlaceholderVersion {
		return info.Main.Version // go run …/cmd/baton@v, or go tool baton (the required version)
	}
	for _, d := range info.Deps {
		if d.Path == scaffold.BatonModule {
			if d.Replace != nil {
				return "(devel)"
			}
			return d.Version
		}
	}
	return "(devel)"
}

func initCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("init: want the app's folder first: baton init <dir> -module <path>")
	}
	dir := args[0]
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	module := fs.String("module", "", "the app's Go module path (required)")
	name := fs.String("name", "", "the app's name: binary, azd project, Azure resource prefix (default: the module path's last element)")
	replace := fs.String("replace", "", "a local checkout of Baton for go.mod's replace directive, absolute or relative to <dir> (required when this baton is not a released version)")
	tidy := fs.Bool("tidy", true, "run go mod tidy in the new app")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	v := version()
	p := scaffold.Params{Module: *module, Name: *name}
	if *replace != "" {
		p.Replace = *replace
	} else if strings.HasPrefix(v, "v") {
		p.BatonVersion = v
	} else {
		return fmt.Errorf("init: this baton is a development build (%s): give -replace <path of the Baton checkout>, or run a released one (go run %s/cmd/baton@latest)", v, scaffold.BatonModule)
	}
	written, err := scaffold.Init(dir, p, v)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %d files into %s\n", len(written), dir)
	if *tidy {
		cmd := exec.CommandContext(ctx, "go", "mod", "tidy")
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go mod tidy in %s: %w", dir, err)
		}
	}
	fmt.Fprintf(out, "next: cd %s && make test && make demo\n", dir)
	return nil
}

func dirFlag(name string, args []string) (string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	dir := fs.String("C", ".", "the app's root folder")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	return *dir, nil
}

func syncCmd(args []string, out io.Writer) error {
	dir, err := dirFlag("sync", args)
	if err != nil {
		return err
	}
	rep, err := scaffold.Sync(dir, version())
	if err != nil {
		return err
	}
	for _, p := range rep.Updated {
		fmt.Fprintln(out, "updated", p)
	}
	for _, p := range rep.Added {
		fmt.Fprintln(out, "added  ", p)
	}
	for _, p := range rep.Removed {
		fmt.Fprintln(out, "removed", p)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(out, "skipped %s: %s\n", s.Path, s.Reason)
	}
	if len(rep.Updated)+len(rep.Added)+len(rep.Removed)+len(rep.Skipped) == 0 {
		fmt.Fprintln(out, "the generated files are up to date")
	}
	return nil
}

func checkCmd(args []string, out io.Writer) (bool, error) {
	dir, err := dirFlag("check", args)
	if err != nil {
		return false, err
	}
	drifts, err := scaffold.Check(dir)
	if err != nil {
		return false, err
	}
	for _, d := range drifts {
		fmt.Fprintf(out, "%s: %s\n", d.Path, d.Problem)
	}
	if len(drifts) > 0 {
		fmt.Fprintf(out, "%d generated files differ from what Baton %s writes\n", len(drifts), version())
		return true, nil
	}
	fmt.Fprintln(out, "the generated files are what Baton writes")
	return false, nil
}
