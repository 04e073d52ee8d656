package devhost

import (
	"bytes"
	"context"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// ErrNotMain: the package Build was asked to build is not a main package (a library builds
// into an archive, not a handler).
var ErrNotMain = errors.New("not a main package")

// Build compiles an app's custom handler the way its users' `go build` would: `go build
// -trimpath` run in appRoot on pkg, the main package ("." when empty), into exe, host.json's
// defaultExecutablePath (relative to its workingDirectory, as the host resolves it). The go
// command's output goes to out. It returns the binary's path, ready for Options.Executable.
//
// A pkg that is not a main package is refused before building (an error wrapping ErrNotMain
// that lists the module's main packages), and exe is replaced only by an executable for this
// platform: the build goes to a temporary file beside it, renamed over exe once checked.
func Build(ctx context.Context, appRoot, pkg string, out io.Writer) (string, error) {
	root, err := filepath.Abs(appRoot)
	if err != nil {
		return "", err
	}
	hc, err := ReadHostConfig(root)
	if err != nil {
		return "", err
	}
	exe := hc.Executable
	if exe == "" || strings.Contains(exe, "%") {
		return "", fmt.Errorf("build: host.json's defaultExecutablePath %q is not a plain file name: build the handler yourself and pass its path", exe)
	}
	dir := root
	if wd := hc.WorkingDirectory; wd != "" {
		dir = wd
		if !filepath.IsAbs(wd) {
			dir = filepath.Join(root, wd)
		}
	}
	if !filepath.IsAbs(exe) {
		exe = filepath.Join(dir, exe)
	}
	if pkg == "" {
		pkg = "."
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	if err := checkMain(ctx, goCmd, root, pkg); err != nil {
		return "", err
	}
	// go build writes into a fresh folder beside exe (same file system, so the rename is
	// atomic); exe is replaced only by a checked executable.
	tmpDir, err := os.MkdirTemp(filepath.Dir(exe), ".build-"+filepath.Base(exe)+"-")
	if err != nil {
		return "", fmt.Errorf("build: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, filepath.Base(exe))
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-o", tmp, pkg)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s from %s in %s: %w", exe, pkg, root, err)
	}
	if err := checkExecutable(tmp); err != nil {
		return "", fmt.Errorf("build %s from %s in %s: the result %w; %s is left as it was", exe, pkg, root, err, exe)
	}
	if err := os.Rename(tmp, exe); err != nil {
		return "", fmt.Errorf("build: %w", err)
	}
	return exe, nil
}

// checkMain asks the go command for pkg's package name and refuses anything but one main
// package. A package the go command cannot list is left to go build to report.
func checkMain(ctx context.Context, goCmd, root, pkg string) error {
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, goCmd, "list", "-f", "{{.Name}}", pkg)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &stdout, io.Discard
	if cmd.Run() != nil {
		return nil
	}
	names := strings.Fields(stdout.String())
	if len(names) == 1 && names[0] == "main" {
		return nil
	}
	what := "package " + strings.Join(names, ", ")
	if len(names) != 1 {
		what = fmt.Sprintf("%d packages", len(names))
	}
	hint := ""
	if mains := mainPackages(ctx, goCmd, root); len(mains) > 0 {
		hint = "; the main packages here: " + strings.Join(mains, ", ")
	}
	return fmt.Errorf("build %s in %s: %w (it is %s)%s", pkg, root, ErrNotMain, what, hint)
}

// mainPackages lists the main packages under root as relative paths (./handler), at most ten.
func mainPackages(ctx context.Context, goCmd, root string) []string {
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, goCmd, "list", "-e", "-f", `{{if eq .Name "main"}}{{.Dir}}{{end}}`, "./...")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &stdout, io.Discard
	_ = cmd.Run()
	var out []string
	for _, d := range strings.Fields(stdout.String()) {
		if rel, err := filepath.Rel(root, d); err == nil && !strings.HasPrefix(rel, "..") {
			out = append(out, "./"+filepath.ToSlash(rel))
		}
		if len(out) == 10 {
			break
		}
	}
	return out
}

// checkExecutable reports why path is not an executable for this platform (an ELF, Mach-O or
// PE executable, by runtime.GOOS, for runtime.GOARCH where the machine is known).
func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || (st.Mode()&0o111 == 0 && runtime.GOOS != "windows") {
		return fmt.Errorf("is not an executable file (mode %s)", st.Mode())
	}
	switch runtime.GOOS {
	case "darwin", "ios":
		f, err := macho.Open(path)
		if err != nil {
			return fmt.Errorf("is not a Mach-O executable: %w", err)
		}
		defer f.Close()
		if f.Type != macho.TypeExec {
			return fmt.Errorf("is a Mach-O file of type %v, not an executable", f.Type)
		}
		if want, ok := machoCPU[runtime.GOARCH]; ok && f.Cpu != want {
			return fmt.Errorf("is a Mach-O executable for %v, not %s", f.Cpu, runtime.GOARCH)
		}
	case "windows":
		f, err := pe.Open(path)
		if err != nil {
			return fmt.Errorf("is not a PE executable: %w", err)
		}
		defer f.Close()
		if f.Characteristics&pe.IMAGE_FILE_EXECUTABLE_IMAGE == 0 || f.Characteristics&pe.IMAGE_FILE_DLL != 0 {
			return errors.New("is a PE file but not an executable image")
		}
	default:
		f, err := elf.Open(path)
		if err != nil {
			return fmt.Errorf("is not an ELF executable: %w", err)
		}
		defer f.Close()
		if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
			return fmt.Errorf("is an ELF file of type %v, not an executable", f.Type)
		}
		if want, ok := elfMachine[runtime.GOARCH]; ok && f.Machine != want {
			return fmt.Errorf("is an ELF executable for %v, not %s", f.Machine, runtime.GOARCH)
		}
	}
	return nil
}

var elfMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "ppc64": elf.EM_PPC64, "s390x": elf.EM_S390,
	"loong64": elf.EM_LOONGARCH,
}

var machoCPU = map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}
