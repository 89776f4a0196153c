{{/* torchdag/plan_model.py's twin: the typed Plan's records, as the chart computes them. */}}

{{/* plan_model.retry_policy(): failurePolicy as numbers, as JSON ({} without restarts). With no Workflow deadline Argo's cap bounds the
doubling waits (catalogue restartBackoffCapSeconds, or the first wait if longer). Takes (dict "values" "catalog"). */}}
{{- define "torchdag.retryPolicy" -}}
{{- $policy := .values.failurePolicy }}{{ $strategy := .catalog.restartStrategy }}{{ $backoff := int64 $policy.backoffSeconds -}}
{{- $cap := ternary nil (max (int64 .catalog.restartBackoffCapSeconds) $backoff) (not (empty .values.timeouts.workflowDeadline)) -}}
{{- toJson (ternary (dict "limit" (int64 $policy.maxRestarts) "recovery" $policy.recovery "retryPolicy" $strategy.retryPolicy "backoffSeconds" $backoff
      "factor" (int64 $strategy.factor) "capSeconds" $cap) dict (gt (int64 $policy.maxRestarts) 0)) -}}
{{- end -}}
