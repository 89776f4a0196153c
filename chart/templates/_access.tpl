{{/*
torchdag/access.py's ascend_pod_security(): an Ascend shape's template-level securityContext,
as a JSON list of YAML lines (the Workflow's fields repeated, since Argo takes the template's in
their place, and the device group added); [] when not Ascend or ascend.deviceGroup is null.
Usage: include "torchdag.ascendPodSecurity" (dict "values" $v "ascend" $entry.ascend) | fromJsonArray
*/}}
{{- define "torchdag.ascendPodSecurity" -}}
{{- $group := .values.ascend.deviceGroup -}}
{{- $lines := list -}}
{{- if and .ascend (not (kindIs "invalid" $group)) -}}
{{- $given := .values.securityContext | default dict -}}
{{- $restricted := eq .values.podSecurity "restricted" -}}
{{- range $key := list "runAsUser" "runAsGroup" "fsGroup" }}{{ if hasKey $given $key }}{{ $lines = append $lines (printf "%s: %d" $key (int64 (index $given
      $key))) }}{{ end }}{{ end -}}
{{- if or (hasKey $given "runAsNonRoot") $restricted }}{{ $lines = append $lines (printf "runAsNonRoot: %t" (ternary $given.runAsNonRoot true (hasKey $given
      "runAsNonRoot"))) }}{{ end -}}
{{- $groups := list -}}
{{- range $given.supplementalGroups }}{{ $groups = append $groups (printf "%d" (int64 .)) }}{{ end -}}
{{- if not (has (printf "%d" (int64 $group)) $groups) }}{{ $groups = append $groups (printf "%d" (int64 $group)) }}{{ end -}}
{{- $lines = append $lines (printf "supplementalGroups: [%s]" (join ", " $groups)) -}}
{{- if $restricted }}{{ $lines = append (append $lines "seccompProfile:") "  type: \"RuntimeDefault\"" }}{{ end -}}
{{- end -}}
{{- toJson $lines -}}
{{- end -}}
