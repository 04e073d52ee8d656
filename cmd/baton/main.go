// Command baton writes and maintains Baton apps.
//
//	go run github.com/batonfn/baton/cmd/baton@<version> init <dir> -module <path> [-name <name>]
//	go tool baton sync [-force]  rewrite the generated files (after go get -u); -force also those you edited
//	go tool baton check          exit 1, with a diff, when a generated file differs from what the pinned Baton writes
//
// init writes a new app: go.mod requiring this version of Baton (cmd/baton and cmd/devhost
// pinned by its tool directive), main.go, an example job with its batontest test, host.json and
// the function folders, local.settings.example.json, azure.yaml, infra/, scripts/, a Makefile
// (make test, make demo), a README and package.json/package-lock.json pinning Azurite; then runs
// go mod tidy there. .baton/generated.json lists the generated files (see package
// internal/tools/scaffold for which are generated and which are yours); deleting a file's entry
// makes it the app's own: sync leaves it alone and check reports it as owned, not as drift. sync
// and check touch nothing outside the app's folder: a manifest entry that is not a file Baton
// generates, or a symlink leading out, is refused by name.
package main

import (
	"context"
	"errors"
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
		err = syncCmd(args[1:], stdout, stderr)
	case "check":
		var drifted bool
		drifted, err = checkCmd(args[1:], stdout, stderr)
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
	if errors.Is(err, flag.ErrHelp) {
		return 0 // the flag set printed its help
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
  baton sync  [-C dir] [-force]  rewrite the generated files you have not edited;
                                 -force: also those you edited or deleted (it names them)
  baton check [-C dir]           exit 1, showing a diff, when a generated file differs
                                 from what this Baton writes

The generated files are listed with their hashes in .baton/generated.json. To own one
(sync leaves it alone, check reports it as yours), delete its entry there.
Run baton <command> -h for a command's flags.
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

// appFlags is the flag set of a command run in an app: -C and the help printed for -h.
func appFlags(name, help string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, help)
		fs.PrintDefaults()
	}
	return fs, fs.String("C", ".", "the app's root folder")
}

func syncCmd(args []string, out, stderr io.Writer) error {
	fs, dir := appFlags("sync", `usage: go tool baton sync [-C dir] [-force]

Rewrites the generated files listed in `+scaffold.ManifestPath+` with what this Baton writes,
each only while it is as Baton wrote it; adds the files this version generates anew and removes
those it no longer does. A generated file you edited or deleted is skipped and named: own it by
deleting its entry from the manifest (then sync and check leave it to you), or take this
version's with -force. Nothing outside the app's folder is read or written.

`, stderr)
	force := fs.Bool("force", false, "also rewrite the generated files you edited or deleted (your edits are lost; files you own are still left alone)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rep, err := scaffold.Sync(*dir, version(), scaffold.SyncOptions{Force: *force})
	for _, p := range rep.Updated {
		fmt.Fprintln(out, "updated    ", p)
	}
	for _, p := range rep.Added {
		fmt.Fprintln(out, "added      ", p)
	}
	for _, p := range rep.Removed {
		fmt.Fprintln(out, "removed    ", p)
	}
	for _, p := range rep.Overwritten {
		fmt.Fprintf(out, "overwritten %s: your edits are replaced by what this Baton writes\n", p)
	}
	for _, p := range rep.Restored {
		fmt.Fprintf(out, "restored    %s\n", p)
	}
	for _, p := range rep.Owned {
		fmt.Fprintf(out, "yours       %s (not in %s: left alone)\n", p, scaffold.ManifestPath)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(out, "skipped     %s: %s\n", s.Path, s.Reason)
	}
	if err != nil {
		return err
	}
	if len(rep.Updated)+len(rep.Added)+len(rep.Removed)+len(rep.Overwritten)+len(rep.Restored)+len(rep.Skipped) == 0 {
		fmt.Fprintln(out, "the generated files are up to date")
	}
	return nil
}

func checkCmd(args []string, out, stderr io.Writer) (bool, error) {
	fs, dir := appFlags("check", `usage: go tool baton check [-C dir]

Exits 1 when a generated file listed in `+scaffold.ManifestPath+` differs from what this
Baton writes, is missing, or is new or retired in this version; each is named with how to
resolve it, and a differing file with a diff (bounded) from what Baton writes to what is on
disk. The files you own (no entry in the manifest) are listed as yours, not checked.

`, stderr)
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	rep, err := scaffold.Inspect(*dir)
	for _, p := range rep.Owned {
		fmt.Fprintf(out, "%s: yours (not in %s), not checked\n", p, scaffold.ManifestPath)
	}
	for _, d := range rep.Drifts {
		fmt.Fprintf(out, "%s: %s\n", d.Path, d.Problem)
		fmt.Fprint(out, d.Diff)
	}
	if err != nil {
		return false, err
	}
	if len(rep.Drifts) > 0 {
		fmt.Fprintf(out, "%d generated files differ from what Baton %s writes\n", len(rep.Drifts), version())
		return true, nil
	}
	fmt.Fprintln(out, "the generated files are what Baton writes")
	return false, nil
}
