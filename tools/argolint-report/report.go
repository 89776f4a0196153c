// Package report is the part of argolint that does not depend on an Argo release: reading
// the command line, naming the documents Argo does not lint, and printing one line per
// problem. Each Argo release line (v4, v3) has a main of its own that only supplies Lint.
package report

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strings"

	"sigs.k8s.io/yaml"
)

// Result is Argo's verdict on one file: whether it held anything Argo lints, and each problem.
type Result struct {
	File   string
	Linted bool
	Errs   []error
}

// Linter runs one Argo release's offline lint over files, as `argo lint --offline --strict` does.
type Linter func(files []string) ([]Result, error)

// lintedKinds are the kinds `argo lint` checks; anything else in a file is named and skipped.
var lintedKinds = map[string]bool{
	"Workflow": true, "WorkflowTemplate": true, "ClusterWorkflowTemplate": true, "CronWorkflow": true,
}

// unparsedFile is how Argo's offline client words a file it cannot decode.
var unparsedFile = regexp.MustCompile(`^failed to parse YAML from file (.*?): `)

// documentSeparator is the one Argo's own parser splits on (workflow/common/parse.go).
var documentSeparator = regexp.MustCompile(`\n---`)

const usage = `usage: argolint [--version] FILE...

Runs Argo's own validator (argo lint --offline --strict, Argo %s) over each FILE.
Prints one line per problem, "FILE: message"; documents of other kinds are named on
standard error and skipped. Exit status: 0 every file valid, 1 a problem, 2 usage.
`

// ModuleVersion is the version of module built into this binary, as go.mod pinned it.
func ModuleVersion(module string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == module {
				return dep.Version
			}
		}
	}
	return "(unknown version)"
}

// Main runs the command line and returns the exit status.
func Main(argoVersion string, lint Linter, args []string, stdout, stderr io.Writer) int {
	files := []string{}
	for _, a := range args {
		switch {
		case a == "--version":
			fmt.Fprintf(stdout, "argolint (Argo Workflows %s)\n", argoVersion)
			return 0
		case a == "-h" || a == "--help":
			fmt.Fprintf(stdout, usage, argoVersion)
			return 0
		case strings.HasPrefix(a, "-") && a != "-":
			fmt.Fprintf(stderr, "argolint: unknown option %s\n"+usage, a, argoVersion)
			return 2
		default:
			files = append(files, a)
		}
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, usage, argoVersion)
		return 2
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.IsDir() {
			fmt.Fprintf(stderr, "argolint: %s: not a readable file\n", f)
			return 2
		}
	}
	failed := false
	for _, f := range files {
		skipped, problems := scanDocuments(f)
		for _, s := range skipped {
			fmt.Fprintf(stderr, "%s: skipped %s (argo lint checks only Argo kinds)\n", f, s)
		}
		// Argo's parser only logs a document that is not YAML; here it is a problem.
		for _, p := range problems {
			fmt.Fprintf(stdout, "%s: %s\n", f, p)
			failed = true
		}
	}
	results, err := lint(files)
	if err != nil {
		// Argo's offline client reads every file first; a file it cannot parse ends it there.
		// Its message names the file in a sentence; print it as every other problem.
		fmt.Fprintf(stdout, "%s\n", unparsedFile.ReplaceAllString(oneLine(err), "$1: "))
		return 1
	}
	for _, r := range results {
		if !r.Linted {
			fmt.Fprintf(stdout, "%s: no Workflow or WorkflowTemplate to lint\n", r.File)
			failed = true
		}
		for _, e := range r.Errs {
			fmt.Fprintf(stdout, "%s: %s\n", r.File, oneLine(e))
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}

// scanDocuments names each document of a file that argo lint skips, as Kind/name, and
// says which documents are not YAML at all.
func scanDocuments(file string) (skipped, problems []string) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, []string{err.Error()}
	}
	for i, text := range documentSeparator.Split(string(data), -1) {
		if len(bytes.TrimSpace([]byte(text))) == 0 {
			continue
		}
		var doc struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name         string `json:"name"`
				GenerateName string `json:"generateName"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
			problems = append(problems, fmt.Sprintf("document %d is not YAML: %s", i+1, oneLine(err)))
			continue
		}
		if doc.Kind == "" || lintedKinds[doc.Kind] {
			continue
		}
		name := doc.Metadata.Name
		if name == "" {
			name = doc.Metadata.GenerateName
		}
		skipped = append(skipped, doc.Kind+"/"+name)
	}
	return skipped, problems
}

// oneLine keeps each problem on one output line: Argo joins some errors with newlines.
func oneLine(err error) string {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		parts := []string{}
		for _, e := range joined.Unwrap() {
			parts = append(parts, oneLine(e))
		}
		return strings.Join(parts, "; ")
	}
	return strings.TrimSpace(strings.ReplaceAll(err.Error(), "\n", " "))
}
