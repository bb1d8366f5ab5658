// Command modproxy lays out one version of a module as a Go module proxy
// directory (the GOPROXY protocol's $module/@v/list, .info, .mod and .zip,
// see `go help goproxy`), so that `go install module/cmd@version` can be
// tried through GOPROXY=file:///dir before the version is published. The
// zip is made with golang.org/x/mod/zip, by the rules the go command and
// proxy.golang.org apply: files in nested modules and vendor directories
// are left out, and names, sizes and the total are checked.
//
// It is its own module so that the xroce module does not require x/mod;
// make release-check runs it on the files of a commit (git archive).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run() error {
	src := flag.String("src", ".", "the module's root directory (holding go.mod)")
	version := flag.String("version", "", "the version to publish, such as v0.1.0")
	out := flag.String("o", "", "the proxy directory to write")
	stamp := flag.String("time", "", "the version's time for .info (RFC 3339); default now")
	flag.Parse()
	if *version == "" || *out == "" {
		flag.Usage()
		return fmt.Errorf("-version and -o are required")
	}
	gomod, err := os.ReadFile(filepath.Join(*src, "go.mod"))
	if err != nil {
		return err
	}
	m := module.Version{Path: modfile.ModulePath(gomod), Version: *version}
	if m.Path == "" {
		return fmt.Errorf("%s/go.mod names no module", *src)
	}
	if err := module.Check(m.Path, m.Version); err != nil {
		return err
	}
	if module.CanonicalVersion(m.Version) != m.Version {
		return fmt.Errorf("version %s is not canonical (%s)", m.Version, module.CanonicalVersion(m.Version))
	}
	t := time.Now().UTC()
	if *stamp != "" {
		if t, err = time.Parse(time.RFC3339, *stamp); err != nil {
			return fmt.Errorf("-time: %w", err)
		}
	}
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	dir := filepath.Join(*out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// What the zip leaves out of the tree, and why (nested modules,
	// vendor directories, VCS metadata).
	omitted, err := modzip.CheckDir(*src)
	if err != nil {
		return err
	}
	zipPath := filepath.Join(dir, m.Version+".zip")
	zf, err := os.Create(zipPath)
	if err != nil {
		return err
	}
	if err := modzip.CreateFromDir(zf, m, *src); err != nil {
		zf.Close()
		return err
	}
	if err := zf.Close(); err != nil {
		return err
	}
	cf, err := modzip.CheckZip(m, zipPath)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{m.Version, t.UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":              []byte(m.Version + "\n"),
		m.Version + ".info": info,
		m.Version + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	st, err := os.Stat(zipPath)
	if err != nil {
		return err
	}
	fmt.Printf("modproxy: %s@%s: %d files, zip %.1f MB, in %s\n", m.Path, m.Version, len(cf.Valid), float64(st.Size())/1e6, *out)
	for _, o := range omitted.Omitted {
		fmt.Printf("modproxy:   left out %s: %v\n", o.Path, o.Err)
	}
	return nil
}
