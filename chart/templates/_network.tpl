{{/* torchdag/network.py's twin: the pod network (network.mode: pod), a headless Service per run, each node pod named in its subdomain. */}}

{{/* network.is_pod(): network.mode when set, else the older hostNetwork key (false means pod); "true" or "". Takes the values. */}}
{{- define "torchdag.isPod" -}}
{{- $mode := toString (.network | default dict).mode -}}
{{- if or (eq $mode "pod") (and (eq $mode "") (eq (toString .hostNetwork) "false")) }}true{{ end -}}
{{- end -}}

{{/* network.node_nic(): a node's own nic, else on the pod network network.nic; "" for none. Takes (dict "node" "values" "pod"). */}}
{{- define "torchdag.nodeNic" -}}{{ .node.nic | default (ternary .values.network.nic "" .pod) }}{{- end -}}

{{/* network.network_plan(): on the pod network sets .plan.network. Takes (dict "plan" "values" "catalog" "inputs" "pod"). */}}
{{- define "torchdag.networkPlan" -}}
{{- if .pod }}{{ $net := .catalog.network -}}
{{- $facts := dict "run" $net.run "runLabel" $net.runLabel "jobLabel" .catalog.labels.job "port" (printf "%d" (int64 .values.port)) "job" (toJson
      .values.name) "hostname" (include "torchdag.fill" (dict "text" .catalog.nodeName "fields" (dict "rank" (index .inputs "node-rank")))) -}}
{{- $_ := set .plan "network" (dict "run" $net.run "task" $net.task "label" (list $net.runLabel $net.run) "patch" (include "torchdag.items" (dict "items"
      $net.podSpecPatch "facts" $facts) | fromJsonArray) "manifest" (include "torchdag.items" (dict "items" $net.service "facts" $facts) | fromJsonArray)) -}}
{{- end -}}
{{- end -}}

{{/* network.node_depends(): the tasks every node task waits for, the gang's PodGroup and the run's Service. Takes the plan. */}}
{{- define "torchdag.nodeDepends" -}}
{{- $tasks := list }}{{ with .gang }}{{ if .manifest }}{{ $tasks = append $tasks .task }}{{ end }}{{ end -}}
{{- with .network }}{{ $tasks = append $tasks .task }}{{ end }}{{ join " && " $tasks -}}
{{- end -}}
