{{/*
torchdag/plan_agents.py's agents_plan(): the helpers' ConfigMap, as JSON ({} when none): its task,
files, manifest lines (as printed under `manifest: |`), pod volume and mount. The files are
chart/files/agents/ (tools/sync_chart.py copies them from torchdag/agents/, byte for byte).
Usage: include "torchdag.agents" (dict "root" $ "catalog" $cat "values" $v "pod" $pod); facts as agents_plan's.
*/}}
{{- define "torchdag.agents" -}}
{{- $v := .values -}}
{{- $entry := .catalog.agents -}}
{{- $runsPreflight := or $v.preflight.enabled .pod -}}
{{- range $v.nodes }}{{ if eq (include "torchdag.nodeNic" (dict "node" . "values" $v "pod" $.pod)) "auto" }}{{ $runsPreflight = true }}{{ end }}{{ end -}}
{{- $recording := include "torchdag.recorder" (dict "catalog" .catalog "values" $v) | fromJsonArray | empty | not -}}
{{- $watch := false }}{{ range $v.scheduling.watchCommand }}{{ if hasPrefix (printf "%s/" (trimSuffix "/" $entry.path)) . }}{{ $watch =
      true }}{{ end }}{{ end -}}
{{- $facts := dict "recorder" $recording "preflight" $runsPreflight "watch" $watch "device" (or $recording $runsPreflight) -}}
{{- $files := include "torchdag.items" (dict "items" $entry.files "facts" $facts) | fromJsonArray -}}
{{- $out := dict -}}
{{- if and .values.agents.fromWorkflow $files -}}
{{- $lines := include "torchdag.items" (dict "items" $entry.manifest "facts" (dict "name" (toJson $entry.configMap))) | fromJsonArray -}}
{{- range $name := $files -}}
{{- $lines = append $lines (printf "  %s: |" (toJson $name)) -}}
{{- range initial (splitList "\n" ($.root.Files.Get (printf "files/agents/%s" $name))) }}{{ $lines = append $lines (ternary (printf "    %s" .) "" (ne .
      "")) }}{{ end -}}
{{- end -}}
{{- $manifest := list -}}
{{- range $lines }}{{ $manifest = append $manifest (ternary (printf "        %s" .) "" (ne . "")) }}{{ end -}}
{{- $out = dict "task" $entry.task "files" $files "manifest" $manifest "volume" (dict "name" $entry.volume "configMap" (dict "name" $entry.configMap)) "mount"
      (dict "name" $entry.volume "mountPath" $entry.path "readOnly" true) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* templates/_plan_agents.j2's agents_task(): the DAG task that creates the ConfigMap. Takes the plan. */}}
{{- define "torchdag.agentsTask" }}
{{- with .agents }}
      - name: {{ toJson .task }}
        template: {{ toJson .task }}
{{- end }}
{{- end }}

{{/* agents_depends(): the watch task waits for it as the node tasks do (`dependencies`: Argo refuses continueOn beside `depends`). Takes the plan. */}}
{{- define "torchdag.agentsDepends" }}
{{- with .agents }}
        dependencies:
        - {{ toJson .task }}
{{- end }}
{{- end }}

{{/* agents_template(): its resource template. Takes the plan. */}}
{{- define "torchdag.agentsTemplate" }}
{{- with .agents }}
  # The helpers the containers run (torchdag/agents/), in a ConfigMap the Workflow owns: any image with python3 runs them.
  - name: {{ toJson .task }}
    resource:
      action: "apply"
      setOwnerReference: true
      manifest: |
{{- range .manifest }}
{{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* agents_mount(): the scheduling watch's and the host check's mount of it. Takes the plan. */}}
{{- define "torchdag.agentsMount" }}
{{- with .agents }}
      volumeMounts:
      - name: {{ toJson .mount.name }}
        mountPath: {{ toJson .mount.mountPath }}
        readOnly: true
{{- end }}
{{- end }}

{{/* plan.recorder(): launcher.recordErrors puts the recording runner before the script, as a JSON list ([] when off,
or when launcher.extraArgs makes the script no Python file). Takes (dict "catalog" "values"). */}}
{{- define "torchdag.recorder" -}}
{{- $python := true }}{{ range .values.launcher.extraArgs | default list }}{{ if has . $.catalog.agents.notPython }}{{ $python = false }}{{ end }}{{ end -}}
{{- toJson (ternary (list (printf "%s/%s" .catalog.agents.path .catalog.agents.recorder)) list (and .values.launcher.recordErrors $python)) -}}
{{- end -}}

{{/* summary.summary_lines()' facts on the script's backend and the helpers. Takes (dict "plan" "values"). */}}
{{- define "torchdag.agentsFacts" -}}
{{- $buckets := false }}{{ range .plan.shapes }}{{ if and (eq $.plan.backend "gloo") (ne .device "cpu") }}{{ $buckets = true }}{{ end }}{{ end -}}
{{- $roles := list }}{{ range include "torchdag.rbacRoles" .plan | fromJsonArray }}{{ $roles = append $roles (printf "%s/%s.yaml" $.plan.catalog.rbac.folder
      .) }}{{ end -}}
{{- $roles = join "," $roles -}}
{{- toJson (dict "cpuBuckets" $buckets "agentsCarried" (not (empty .plan.agents)) "agentsFromImage" (not .values.agents.fromWorkflow) "agentCount" (len
      (.plan.agents.files | default list)) "agentsPath" .plan.catalog.agents.path "roles" $roles) -}}
{{- end -}}

{{/* torchdag/rbac.py's roles(): the names of the Roles a job needs (catalogue `rbac`), as a JSON list. Takes the plan. */}}
{{- define "torchdag.rbacRoles" -}}
{{- $facts := dict "helpers" (not (empty .agents)) "podNetwork" (not (empty .network)) "elastic" (lt (int .elasticFrom) (len .nodes)) -}}
{{- range $kind, $_ := .catalog.gangs }}{{ $_ := set $facts $kind (eq $kind ($.gang | default dict).kind) }}{{ end -}}
{{- include "torchdag.items" (dict "items" .catalog.rbac.roles "facts" $facts) -}}
{{- end -}}
