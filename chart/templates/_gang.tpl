{{/* torchdag/gang.py's twin: the gang's pod labels and annotations, and the PodGroup the Workflow creates first. */}}
{{- define "torchdag.gang" -}}
{{- $v := .values -}}
{{- $scheduling := $v.scheduling -}}
{{- if ne $scheduling.gang "none" -}}
{{- $entry := index .catalog.gangs $scheduling.gang -}}
{{- $group := .catalog.gangName -}}
{{- $count := len .nodes -}}
{{- $least := int ($v.elastic.minNodes | default $count) }}{{/* the fewest machines the job may run with (plan.elastic_from) */ -}}
{{- $fill := dict "group" $group "count" (toString $count) "queue" ($scheduling.queue | default "") -}}
{{- $gang := dict "kind" $scheduling.gang "task" .catalog.gangTask "schedulerName" ($scheduling.schedulerName | default $entry.schedulerName) "roleAnnotation"
      $entry.roleAnnotation -}}
{{- range $field, $source := dict "labels" $entry.podLabels "annotations" $entry.podAnnotations -}}
{{- $pairs := list -}}
{{- range $key, $value := $source }}{{ $pairs = append $pairs (list $key (include "torchdag.fill" (dict "text" $value "fields" $fill))) }}{{ end -}}
{{- $_ := set $gang $field $pairs -}}
{{- end -}}
{{- with $entry.podGroup -}}
{{- $facts := dict "count" (toString $count) "minMember" (toString $least) "timeout" (printf "%d" (int64 $scheduling.timeout)) "queue" (ternary (toJson
      $scheduling.queue) "" (not (empty $scheduling.queue))) -}}
{{- $_ := set $facts "priorityClassName" (ternary (toJson $v.workflow.priorityClassName) "" (not (empty $v.workflow.priorityClassName))) -}}
{{- $manifest := include "torchdag.items" (dict "items" $.catalog.podGroupManifest "facts" (dict "apiVersion" (toJson .apiVersion) "name" (toJson $group))) |
      fromJsonArray -}}
{{- range include "torchdag.items" (dict "items" .spec "facts" $facts) | fromJsonArray }}{{ $manifest = append $manifest (printf "  %s: %s" (index . 0) (index
      . 1)) }}{{ end -}}
{{- $totals := dict -}}
{{- range $_, $node := ternary $.nodes dict .minResources }}{{ if lt (int $node.rank) $least -}}
{{- with index ($v.resourceNames | default dict) $node.accelerator | default (index $.catalog.kinds $node.accelerator).resource }}{{ $_ := set $totals . (add
      (get $totals . | default 0) $node.devices) }}{{ end -}}
{{- end }}{{ end -}}
{{- if $totals }}{{ $manifest = append $manifest "  minResources:" }}{{ end -}}
{{- range $name, $total := $totals }}{{ $manifest = append $manifest (printf "    %s: %s" (toJson $name) (toJson (toString $total))) }}{{ end -}}
{{- $_ := set $gang "manifest" $manifest -}}
{{- end -}}
{{- $_ := set .plan "gang" $gang -}}
{{- end -}}
{{- end -}}
