// Command check is `helm lint` and `helm template` for lagbridge's chart,
// built from Helm's own Go packages (helm.sh/helm/v3, the version in this
// folder's go.mod) so that the test suite needs no helm binary: Helm is not
// packaged in Debian bookworm and no binary may be downloaded here.
//
// It is its own Go module so that the main module does not depend on
// Kubernetes' packages. deploy/deploy_test.go runs it with `go run`:
//
//	go run . lint     CHART [-f values.yaml]...   # exit 1 on any lint error or warning
//	go run . template CHART [-f values.yaml]... [--name NAME] [--namespace NS]
//
// template prints what `helm template NAME CHART` prints: every rendered
// manifest in Helm's install order, each as "---\n# Source: <path>\n<yaml>".
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
)

type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) < 2 {
		return errors.New("usage: check lint|template CHART [-f values.yaml]... [--name NAME] [--namespace NS]")
	}
	cmd, chartDir := args[0], args[1]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var valueFiles files
	fs.Var(&valueFiles, "f", "values file (repeatable; later files win)")
	name := fs.String("name", "lagbridge", "release name")
	ns := fs.String("namespace", "default", "namespace")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	vals := map[string]interface{}{}
	for _, f := range valueFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return err
		}
		vals = chartutil.CoalesceTables(v.AsMap(), vals)
	}
	switch cmd {
	case "lint":
		return lintChart(chartDir, vals, *ns, out)
	case "template":
		return template(chartDir, vals, *name, *ns, out)
	}
	return fmt.Errorf("unknown command %q (lint, template)", cmd)
}

// lintChart runs every rule of `helm lint --strict`: warnings fail too.
func lintChart(dir string, vals map[string]interface{}, ns string, out io.Writer) error {
	l := lint.AllWithKubeVersionAndSchemaValidation(dir, vals, ns, nil, false)
	bad := 0
	for _, m := range l.Messages {
		fmt.Fprintln(out, m)
		if m.Severity >= support.WarningSev {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%s: %d lint warnings or errors", dir, bad)
	}
	fmt.Fprintf(out, "%s: linted, no warnings (%d info messages)\n", dir, len(l.Messages))
	return nil
}

func template(dir string, vals map[string]interface{}, name, ns string, out io.Writer) error {
	ch, err := loader.Load(dir)
	if err != nil {
		return err
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return err
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: name, Namespace: ns, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return err
	}
	rendered, err := engine.Render(ch, rv)
	if err != nil {
		return err
	}
	for k := range rendered {
		if strings.HasSuffix(k, "NOTES.txt") {
			delete(rendered, k)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(rendered, chartutil.DefaultVersionSet, releaseutil.InstallOrder)
	if err != nil {
		return err
	}
	if len(hooks) > 0 {
		sort.Slice(hooks, func(i, j int) bool { return hooks[i].Path < hooks[j].Path })
	}
	for _, m := range manifests {
		fmt.Fprintf(out, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	for _, h := range hooks {
		fmt.Fprintf(out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return nil
}
