// argolint runs Argo Workflows' own validator (the code behind `argo lint --offline
// --strict`) on rendered files, without a cluster or the argo CLI: the CLI cannot be built
// with `go install` (it embeds the UI, which the module lacks), so this calls the same
// lint package from a main of its own.
package main

import (
	"context"
	"io"
	"os"

	"github.com/argoproj/argo-workflows/v4/cmd/argo/lint"
	"github.com/argoproj/argo-workflows/v4/pkg/apiclient"
	"github.com/argoproj/argo-workflows/v4/util/logging"

	"torchdag/tools/argolint-report"
)

// argoModule is the Argo module whose validator this is; its version (pinned in go.mod)
// is read from the binary's build information.
const argoModule = "github.com/argoproj/argo-workflows/v4"

func lintFiles(files []string) ([]report.Result, error) {
	// Argo's packages take their logger from the context and panic without one; problems
	// come back as values, so its log lines would only repeat them.
	ctx := logging.WithLogger(context.Background(), logging.NewSlogLoggerCustom(logging.Error, logging.Text, io.Discard))
	ctx, client, err := apiclient.NewClientFromOptsWithContext(ctx, apiclient.Opts{Offline: true, OfflineFiles: files})
	if err != nil {
		return nil, err
	}
	workflows := client.NewWorkflowServiceClient(ctx)
	templates, err := client.NewWorkflowTemplateServiceClient()
	if err != nil {
		return nil, err
	}
	clusterTemplates, err := client.NewClusterWorkflowTemplateServiceClient()
	if err != nil {
		return nil, err
	}
	crons, err := client.NewCronWorkflowServiceClient()
	if err != nil {
		return nil, err
	}
	res, err := lint.Lint(ctx, &lint.LintOptions{
		Files:            files,
		Strict:           true,
		DefaultNamespace: "default",
		ServiceClients: lint.ServiceClients{
			WorkflowsClient:               workflows,
			WorkflowTemplatesClient:       templates,
			ClusterWorkflowTemplateClient: clusterTemplates,
			CronWorkflowsClient:           crons,
		},
	})
	if err != nil {
		return nil, err
	}
	out := []report.Result{}
	for _, r := range res.Results {
		out = append(out, report.Result{File: r.File, Linted: r.Linted, Errs: r.Errs})
	}
	return out, nil
}

func main() {
	os.Exit(report.Main(report.ModuleVersion(argoModule), lintFiles, os.Args[1:], os.Stdout, os.Stderr))
}
