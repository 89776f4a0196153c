// argolint for the Argo Workflows v3 line, which many clusters still run: the same
// command as tools/argo's, over v3's lint package (v3 takes no logger in the context).
package main

import (
	"context"
	"io"
	"os"

	"github.com/argoproj/argo-workflows/v3/cmd/argo/lint"
	"github.com/argoproj/argo-workflows/v3/pkg/apiclient"
	log "github.com/sirupsen/logrus"

	"torchdag/tools/argolint-report"
)

// argoModule is the Argo module whose validator this is; its version (pinned in go.mod)
// is read from the binary's build information.
const argoModule = "github.com/argoproj/argo-workflows/v3"

func lintFiles(files []string) ([]report.Result, error) {
	// Problems come back as values; Argo's own log lines would only repeat them.
	log.SetOutput(io.Discard)
	ctx, client, err := apiclient.NewClientFromOpts(apiclient.Opts{Offline: true, OfflineFiles: files, Context: context.Background()})
	if err != nil {
		return nil, err
	}
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
			WorkflowsClient:               client.NewWorkflowServiceClient(),
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
