{{/* plan.scheduling_watch: the task that bounds scheduling (scheduling.timeout) in every job (catalogue `watch`). */}}
{{- define "torchdag.watch" -}}
{{- $cat := .catalog -}}
{{- $group := dict -}}
{{- $watched := dict -}}
{{- with .plan.gang }}{{ $group = (index $cat.gangs .kind).podGroup | default dict }}{{ $watched = $group | default ((index $cat.gangs .kind).watchObject |
      default dict) }}{{ end -}}
{{- $count := len .nodes -}}
{{- $least := int .plan.elasticFrom -}}
{{- $facts := merge (dict "group" $cat.gangName "count" (toString $count) "gang" (not (empty .plan.gang)) "timeout" (printf "%d" (int64
      .values.scheduling.timeout)) "podGroup" (not (empty $group)) "watchObject" (not (empty $watched)) "elastic" (lt $least $count) "minNodes" (toString
      $least) "rejoinSeconds" (printf "%d" (int64 .values.elastic.rejoinSeconds)) "input:node-rank" (include "torchdag.fill" (dict "text"
      $cat.container.inputParameter "fields" (dict "name" "node-rank")))) $watched -}}
{{- $command := concat .values.scheduling.watchCommand (include "torchdag.items" (dict "items" $cat.watch.args "facts" $facts) | fromJsonArray) -}}
{{- $_ := set .plan "watch" (dict "task" (index $cat.watch.task (ternary "gang" "none" (not (empty .plan.gang)))) "command" (replace "$" "$$" (toJson
      $command) | fromJsonArray) "requests" $cat.watch.requests "env" $cat.watch.env) -}}
{{- /* plan.host_check: under node recovery, the scheduling watch on each retried pod (catalogue `hostCheck`) */ -}}
{{- if .plan.nodeRecovery -}}
{{- $check := concat .values.scheduling.watchCommand (include "torchdag.items" (dict "items" $cat.hostCheck.args "facts" $facts) | fromJsonArray) -}}
{{- $_ := set .plan "hostCheck" (dict "task" $cat.hostCheck.task "command" (replace "$" "$$" (toJson $check) | fromJsonArray) "requests"
      $cat.hostCheck.requests "env" $cat.watch.env "when" (include "torchdag.fill" (dict "text" $cat.hostCheck.when "fields" (dict "retries"
      $cat.container.argoArguments.restart)))) -}}
{{- end -}}
{{- end -}}

{{/* templates/_watch.j2: the watch's template, after the gang's (with a gang) or after the node templates. */}}
{{- define "torchdag.watchTemplate" -}}
{{- $plan := .plan }}{{ $v := .v }}
{{- if $plan.gang }}
  # Stops the Workflow, naming the unplaced pods, if the gang is not placed in time; then,
  # while the job runs (a daemon), does the same for a pod re-created on a lost host.
{{- else }}
  # Stops the Workflow, naming the host and the scheduler's reason, if a node's pod is not
  # scheduled within scheduling.timeout; then, while the job runs (a daemon), does the same
  # for a pod re-created on a lost host (an elastic member's pod is ended instead).
{{- end }}
  - name: {{ toJson $plan.watch.task }}
    daemon: {{ toJson $plan.catalog.watch.daemon }}
    metadata:
      labels:
        {{ toJson $plan.catalog.labels.role }}: {{ toJson $plan.watch.task }}
    container:
      image: {{ toJson $v.image }}
      imagePullPolicy: {{ toJson $v.imagePullPolicy }}
      command:
      {{- range $plan.watch.command }}
      - {{ toJson . }}
      {{- end }}
      env:
      {{- range $plan.watch.env }}
      - name: {{ index . 0 | toJson }}
        value: {{ index . 1 | toJson }}
      {{- end }}
      {{- include "torchdag.agentsMount" $plan }}
      resources:
        requests:
          {{- range $key, $value := $plan.watch.requests }}
          {{ toJson $key }}: {{ toJson $value }}
          {{- end }}
      {{- include "torchdag.containerSecurity" $plan.security }}
{{- end -}}
