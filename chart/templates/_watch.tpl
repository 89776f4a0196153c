{{/* jobparts.scheduling_watch: the task that bounds scheduling (scheduling.timeout) in every job: the gang
watch under a gang; without one the same agent (--what=pods) names the host a pod was not scheduled on. */}}
{{- define "torchdag.watch" -}}
{{- $scheduling := .values.scheduling -}}
{{- if .plan.gang -}}
{{- $_ := set .plan "watch" (dict "task" "gang-watch" "command" .plan.gang.watch) -}}
{{- else -}}
{{- $command := concat $scheduling.watchCommand (list "--workflow={{workflow.name}}" "--namespace={{workflow.namespace}}" (printf "--pods=%d" (len .nodes)) (printf "--timeout=%d" (int64 $scheduling.timeout)) "--what=pods") -}}
{{- $_ := set .plan "watch" (dict "task" "schedule-watch" "command" (replace "$" "$$" (toJson $command) | fromJsonArray)) -}}
{{- end -}}
{{- end -}}

{{/* templates/watch.yaml.j2: the watch's template, after the gang's (with a gang) or after the node templates. */}}
{{- define "torchdag.watchTemplate" -}}
{{- $plan := .plan }}{{ $v := .v }}
{{- if $plan.gang }}
  # Stops the Workflow, naming the unplaced pods, if the gang is not placed in time.
{{- else }}
  # Stops the Workflow, naming the host and the scheduler's reason, if a node's pod is not
  # scheduled within scheduling.timeout.
{{- end }}
  - name: {{ toJson $plan.watch.task }}
    metadata:
      labels:
        "torchdag.io/role": {{ toJson $plan.watch.task }}
    container:
      image: {{ toJson $v.image }}
      imagePullPolicy: {{ toJson $v.imagePullPolicy }}
      command:
      {{- range $plan.watch.command }}
      - {{ toJson . }}
      {{- end }}
      env:
      - name: "PYTHONUNBUFFERED"
        value: "1"
      {{- include "torchdag.agentsMount" $plan }}
      resources:
        requests:
          "cpu": "50m"
          "memory": "64Mi"
      {{- include "torchdag.containerSecurity" $plan.security }}
{{- end -}}
