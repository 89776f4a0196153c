{{/* Helpers, each named after the Python it mirrors. Helm reads every YAML number as float64: integers print through int64. */}}

{{/* Name of every object: the release name (a Workflow cannot be installed with only generateName). */}}
{{- define "torchdag.fullname" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Namespace of every object: values `namespace`, else the release namespace. */}}
{{- define "torchdag.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* Helm's standard labels, for metadata only: spec (pod labels included) stays equal to render.py's. */}}
{{- define "torchdag.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/name: {{ .Chart.Name | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Role and RoleBinding of the executor: "<release>-executor", within 63 characters. */}}
{{- define "torchdag.executorRoleName" -}}
{{- printf "%s-executor" (include "torchdag.fullname" . | trunc 54 | trimSuffix "-") -}}
{{- end -}}

{{/* ServiceAccount the pods run as; the Role is bound to it (Kubernetes falls back to `default`). */}}
{{- define "torchdag.serviceAccountName" -}}
{{- .Values.serviceAccountName | default "default" -}}
{{- end -}}

{{/* yamlout.quantity() (Python's str()): whole numbers as integers ("4"); below 1e-4 exponent form
("1e-05", as Go's %v); otherwise the shortest round-tripping digits (Go's JSON encoder). */}}
{{- define "torchdag.quantity" -}}
{{- if kindIs "string" . }}{{ . }}
{{- else if eq (float64 .) (floor (float64 .)) }}{{ ternary "0" (printf "%.0f" (float64 .)) (eq (float64 .) 0.0) }}
{{- else if lt (float64 .) 0.0001 }}{{ printf "%v" (float64 .) }}
{{- else }}{{ toJson (float64 .) }}{{ end -}}
{{- end -}}

{{/* validate.quantity_value(): a quantity as a number, the suffix's factor multiplied or divided (catalogue `quantity`). Takes (list $catalog quantity). */}}
{{- define "torchdag.quantityValue" -}}
{{- $text := toString (index . 1) -}}
{{- $suffix := regexFind "([KMGTPE]i|[numkMGTPE])$" $text -}}
{{- $scale := (index . 0).quantity -}}
{{- if hasKey $scale.divide $suffix }}{{ divf (float64 (trimSuffix $suffix $text)) (index $scale.divide $suffix) }}
{{- else }}{{ mulf (float64 (trimSuffix $suffix $text)) (index $scale.multiply $suffix | default 1) }}{{ end -}}
{{- end -}}

{{/* yamlout.toleration(): one toleration as a flow mapping; the schema fixes its fields. */}}
{{- define "torchdag.toleration" -}}
{{- $toleration := . -}}
{{- $fields := list -}}
{{- range $key := list "key" "operator" "value" "effect" -}}
{{- if hasKey $toleration $key }}{{ $fields = append $fields (printf "%s: %s" $key (toJson (index $toleration $key))) }}{{ end -}}
{{- end -}}
{{- if hasKey $toleration "tolerationSeconds" }}{{ $fields = append $fields (printf "tolerationSeconds: %d" (int64 $toleration.tolerationSeconds)) }}{{ end -}}
{{- printf "{%s}" (join ", " $fields) -}}
{{- end -}}

{{/* catalog.fill(): `{name}` replaced by .fields.name in one pass (a filled value is never read
again); names not in .fields stay as written. Takes (dict "text" "fields"). */}}
{{- define "torchdag.fill" -}}
{{- $parts := splitList "{" .text -}}
{{- first $parts -}}
{{- range rest $parts -}}
{{- $field := splitn "}" 2 . -}}
{{- if and (contains "}" .) (hasKey $.fields $field._0) }}{{ index $.fields $field._0 }}{{ $field._1 }}{{ else }}{{ printf "{%s" . }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* catalog.items(): a conditional list of the catalogue (strings, or {value, if, unless}: kept
when every fact in `if` holds and none in `unless`), filled from .facts, as JSON. Takes (dict "items" "facts"). */}}
{{- define "torchdag.items" -}}
{{- $out := list -}}
{{- range $item := .items -}}
{{- $entry := ternary (dict "value" $item) $item (kindIs "string" $item) -}}
{{- $on := true -}}
{{- range $entry.if }}{{ if not (index $.facts .) }}{{ $on = false }}{{ end }}{{ end -}}
{{- range $entry.unless }}{{ if index $.facts . }}{{ $on = false }}{{ end }}{{ end -}}
{{- if and $on (kindIs "string" $entry.value) -}}
{{- $out = append $out (include "torchdag.fill" (dict "text" $entry.value "fields" $.facts)) -}}
{{- else if $on -}}
{{- $filled := list -}}
{{- range $entry.value }}{{ $filled = append $filled (include "torchdag.fill" (dict "text" . "fields" $.facts)) }}{{ end -}}
{{- $out = append $out $filled -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* catalog.problem(): "path: message" of a rule coded in both validators, worded by the
catalogue's `messages`. Takes (list $catalog "rule-id" "path" (dict fields)). */}}
{{- define "torchdag.problem" -}}
{{- printf "%s: %s" (index . 2) (include "torchdag.fill" (dict "text" (index (index . 0).messages (index . 1)) "fields" (index . 3))) -}}
{{- end -}}

{{/* summary.summary_lines(): the lines and per-node table, each line after .prefix; .short keeps the first
and last four rows of a large job. Takes (dict "plan" "values" "short" "prefix"). Rows print as they are computed. */}}
{{- define "torchdag.summary" -}}
{{- $plan := .plan -}}
{{- $v := .values -}}
{{- $prefix := .prefix -}}
{{- $count := len $plan.nodes -}}
{{- $pg := $v.timeouts.processGroup -}}
{{- $texts := $plan.catalog.summary -}}
{{- $scheduling := $v.scheduling -}}
{{- $gang := dict "gang" $scheduling.gang "timeout" (printf "%d" (int64 $scheduling.timeout)) "queue" (include "torchdag.fill" (dict "text" (ternary
      $texts.queue.some $texts.queue.none (not (empty $scheduling.queue))) "fields" $scheduling)) -}}
{{- $hccl := ternary "0" (include "torchdag.hcclExecTimeout" (dict "catalog" $plan.catalog "seconds" $pg)) (empty $pg) -}}
{{- $facts := dict "name" $v.name "count" $count "worldSize" $plan.worldSize "backend" $plan.backend "reason" $plan.backendReason "master" $plan.master.name
      "address" $plan.masterAddress "port" (int64 $v.port) "podNetwork" (not (empty $plan.network)) "run" $plan.catalog.network.run -}}
{{- $_ := merge $facts (dict "gang" (include "torchdag.fill" (dict "text" (ternary $texts.gang.none $texts.gang.some (eq $scheduling.gang "none")) "fields"
      $gang)) "restarts" (int64 $v.failurePolicy.maxRestarts) "hcclExecTimeout" $hccl "pgTimeout" (int64 $pg) "nodeRecovery" $plan.nodeRecovery "minNodes"
      $plan.elasticFrom) -}}
{{- $_ := merge $facts (dict "step" (int64 $plan.catalog.hcclExecTimeout.step) "max" (int64 $plan.catalog.hcclExecTimeout.max)) (include "torchdag.agentsFacts"
      (dict "plan" $plan "values" $v) | fromJson) -}}
{{- range $plan.shapes }}{{ if and $pg (index $plan.catalog.devices .device).ascend (ne $hccl (printf "%d" (int64 $pg))) }}{{ $_ := set $facts "hcclRounded"
      true }}{{ end }}{{ end -}}
{{- $half := div (int $texts.shortRows) 2 -}}
{{- $short := and .short (gt $count (mul 2 $half)) -}}
{{- $columns := $texts.columns }}{{ $widths := dict }}{{ $header := dict }}{{ range $columns }}{{ $_ := set $widths . (len .) }}{{ $_ := set $header .
      . }}{{ end -}}
{{- range $key, $node := $plan.nodes }}{{ if or (not $short) (lt (int $node.rank) $half) (ge (int $node.rank) (sub $count $half)) -}}
{{- range $column, $cell := include "torchdag.summaryCells" $node | fromJson }}{{ $_ := set $widths $column (max (index $widths $column) (len
      $cell)) }}{{ end -}}
{{- end }}{{ end -}}
{{- range $index, $line := include "torchdag.items" (dict "items" $texts.lines "facts" $facts) | fromJsonArray }}
{{- if $index }}{{ "\n" }}{{ end }}{{ $prefix }}{{ $line }}
{{- end }}
{{ $prefix }}{{ include "torchdag.summaryRow" (dict "columns" $columns "widths" $widths "cells" $header) }}
{{- range $key, $node := $plan.nodes }}
{{- if and $short (eq (int $node.rank) $half) }}
{{ $prefix }}{{ include "torchdag.fill" (dict "text" $texts.skipped "fields" (dict "skipped" (sub $count (mul 2 $half)))) }}
{{- end }}
{{- if or (not $short) (lt (int $node.rank) $half) (ge (int $node.rank) (sub $count $half)) }}
{{ $prefix }}{{ include "torchdag.summaryRow" (dict "columns" $columns "widths" $widths "cells" (include "torchdag.summaryCells" $node | fromJson)) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* One node's cells in the summary table, by column (catalogue summary.columns), as JSON. */}}
{{- define "torchdag.summaryCells" -}}
{{- toJson (dict "rank" (toString .rank) "node" .name "address" .address "nic" (.nic | default "-") "accelerator" .accelerator "devices" (toString .devices)
      "template" .shape.name) -}}
{{- end -}}

{{/* One line of the summary table: the first column right-aligned, the others left-aligned, trailing spaces dropped. Takes (dict "columns" "widths"
      "cells"). */}}
{{- define "torchdag.summaryRow" -}}
{{- $parts := list }}{{ range $index, $column := .columns }}{{ $parts = append $parts (printf (ternary "%*s" "%-*s" (eq $index 0)) (int (index $.widths
      $column)) (index $.cells $column)) }}{{ end -}}
{{- regexReplaceAll " +$" (join "  " $parts) "" -}}
{{- end -}}

{{/* The summary as YAML comments, as render.py writes it above the Workflow. Takes (dict "plan" "values"). */}}
{{- define "torchdag.summaryComment" -}}
{{ include "torchdag.summary" (dict "plan" .plan "values" .values "short" false "prefix" "# ") }}
# {{ .plan.catalog.summary.footer }}
{{- end -}}

