{{/* plan.node_recovery, plan.elastic_from and the job facts they give every shape (plan.job_facts);
sets .plan.nodeRecovery and .plan.elasticFrom. Takes (dict "plan" "job" "values" "catalog"). */}}
{{- define "torchdag.recoveryFacts" -}}
{{- $v := .values }}{{ $restarts := int64 $v.failurePolicy.maxRestarts -}}
{{- $nodeRecovery := and (gt $restarts 0) (eq $v.failurePolicy.recovery "node") -}}
{{- $elasticFrom := int $v.elastic.minNodes | default (len $v.nodes) -}}
{{- $_ := merge .job (dict "recovery" (ternary "node" "job" $nodeRecovery) "nodeRecovery" $nodeRecovery "maxRestarts" (toString $restarts) "minNodes" (toString
      $elasticFrom) "rejoinSeconds" (printf "%d" (int64 $v.elastic.rejoinSeconds)) "run" .catalog.network.run) -}}
{{- $_ := merge .plan (dict "nodeRecovery" $nodeRecovery "elasticFrom" $elasticFrom) -}}
{{- end -}}

{{/* recovery.argo_retry(): the typed retry policy (.plan.retryPolicy, plan_model.retry_policy's numbers) as Argo's
retryStrategy, its strings ("10s"), as JSON. Takes the typed policy. */}}
{{- define "torchdag.argoRetry" -}}
{{- $backoff := dict "duration" (printf "%ds" (int64 .backoffSeconds)) "factor" (printf "%d" (int64 .factor)) -}}
{{- if not (kindIs "invalid" .capSeconds) }}{{ $_ := set $backoff "cap" (printf "%ds" (int64 .capSeconds)) }}{{ end -}}
{{- toJson (dict "limit" (printf "%d" (int64 .limit)) "retryPolicy" .retryPolicy "backoff" $backoff) -}}
{{- end -}}

{{/* templates/_recovery.j2 node_task(): one node task's body after its name (the template it calls, what
it waits for, whether the DAG goes on without it, its arguments). Takes (dict "plan" "shape" "arguments" "elastic"). */}}
{{- define "torchdag.nodeTask" }}
        template: {{ toJson (ternary .shape.retryWrapper .shape.name (not (empty .plan.nodeRetry))) }}
        {{- with .plan.depends }}
        dependencies:
        {{- range splitList " && " . }}
        - {{ toJson . }}
        {{- end }}
        {{- end }}
        {{- if .elastic }}
        # An elastic member (elastic.minNodes): the job goes on without it.
        continueOn:
          error: true
          failed: true
        {{- end }}
        arguments:
          parameters:
          {{- range .arguments }}
          {{- if not (and $.plan.nodeRetry (hasKey $.plan.catalog.container.argoArguments (index . 0))) }}
          - name: {{ index . 0 | toJson }}
            value: {{ index . 1 | toJson }}
          {{- end }}
          {{- end }}
{{- end -}}

{{/* templates/_recovery.j2 node_retry(): under failurePolicy.recovery node, each shape's retry wrapper
(its step group: the node's pod and, on a retry, the host check), then the host check. Takes (dict "plan" "values"). */}}
{{- define "torchdag.nodeRetry" }}
  {{- $plan := .plan }}
  {{- $check := $plan.hostCheck }}
  {{- with $plan.nodeRetry }}
  {{- $retry := . }}
  {{- range $shape := $plan.shapes }}
  # Retries this node alone; the other nodes keep their pods (failurePolicy.recovery node).
  - name: {{ toJson $shape.retryWrapper }}
    retryStrategy:
      limit: {{ toJson $retry.limit }}
      retryPolicy: {{ toJson $retry.retryPolicy }}
      backoff:
        duration: {{ toJson $retry.backoff.duration }}
        factor: {{ toJson $retry.backoff.factor }}
        {{- with $retry.backoff.cap }}
        cap: {{ toJson . }}
        {{- end }}
    inputs:
      parameters:
      {{- range $shape.parameters }}
      {{- if not (hasKey $plan.catalog.container.argoArguments .) }}
      - name: {{ toJson . }}
      {{- end }}
      {{- end }}
    steps:
    - - name: {{ toJson $plan.catalog.container.retryStep }}
        template: {{ toJson $shape.name }}
        arguments:
          parameters:
          {{- range $shape.parameters }}
          - name: {{ toJson . }}
            value: {{ toJson (get $plan.catalog.container.argoArguments . | default (include "torchdag.fill" (dict "text"
                  $plan.catalog.container.inputParameter "fields" (dict "name" .)))) }}
          {{- end }}
      - name: {{ toJson $check.task }}
        template: {{ toJson $check.task }}
        when: "{{ $check.when }}"
        arguments:
          parameters:
          - name: "node-rank"
            value: {{ index $plan.inputs "node-rank" | toJson }}
  {{- end }}
  # A retried node's pod is scheduled within scheduling.timeout (an elastic member's within
  # elastic.rejoinSeconds), else this names its host and ends the wait.
  - name: {{ toJson $check.task }}
    inputs:
      parameters:
      - name: "node-rank"
    metadata:
      labels:
        {{ toJson $plan.catalog.labels.role }}: {{ toJson $check.task }}
    container:
      image: {{ toJson $.values.image }}
      imagePullPolicy: {{ toJson $.values.imagePullPolicy }}
      command:
      {{- range $check.command }}
      - {{ toJson . }}
      {{- end }}
      env:
      {{- range $check.env }}
      - name: {{ index . 0 | toJson }}
        value: {{ index . 1 | toJson }}
      {{- end }}
      {{- include "torchdag.agentsMount" $plan }}
      resources:
        requests:
          {{- range $key, $value := $check.requests }}
          {{ toJson $key }}: {{ toJson $value }}
          {{- end }}
      {{- include "torchdag.containerSecurity" $plan.security }}
  {{- end }}
{{- end -}}
