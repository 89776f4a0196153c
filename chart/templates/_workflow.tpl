{{/*
torchdag.workflow: the Workflow (or WorkflowTemplate) as text. torchdag.plan (_plan.tpl)
computes every list, this prints them exactly as templates/workflow.yaml.j2 does, so
everything under `spec` is byte for byte what render.py prints (a test diffs the text).
Every scalar leaves through toJson. User values are never passed through `tpl`.
Usage: include "torchdag.workflow" (dict "root" $ "plan" $plan), $plan filled by torchdag.plan.
*/}}
{{- define "torchdag.workflow" -}}
{{- $root := .root }}{{ $plan := .plan -}}
{{- $planProblems := list -}}
{{- /* render.gang_problem: more node templates than the gang scheduler admits podSets (Kueue) */ -}}
{{- with $plan.gang }}{{ $entry := index $plan.catalog.gangs .kind }}{{ if gt (len $plan.shapes) (int ($entry.maxPodSets | default (len $plan.shapes))) -}}
{{- $names := list }}{{ range $plan.shapes }}{{ $names = append $names .name }}{{ end -}}
{{- $planProblems = append $planProblems (printf "scheduling.gang: %s" (include "torchdag.fill" (dict "text" $entry.tooManyPodSets "fields" (dict "count" (len
      $plan.shapes) "max" $entry.maxPodSets "names" (join ", " $names))))) -}}
{{- end }}{{ end -}}
{{- /* render.full_crd_problems (rule templates-too-many): Argo's full CRDs take at most argoFullCrdMaxItems templates and DAG tasks */ -}}
{{- $helpers := add (ternary 1 0 (not (empty $plan.network))) (ternary 1 0 (not (empty $plan.agents))) -}}
{{- with $plan.gang }}{{ if .manifest }}{{ $helpers = add1 $helpers }}{{ end }}{{ end -}}
{{- $nodeTasks := len $plan.nodes }}{{ with $plan.loops }}{{ $nodeTasks = len . }}{{ end -}}
{{- $counts := dict "spec.templates" (add 2 (mul (len $plan.shapes) (ternary 2 1 (not (empty $plan.nodeRetry)))) (ternary 1 0 (not (empty $plan.hostCheck)))
      $helpers) "spec.templates[0].dag.tasks" (add $nodeTasks 1 $helpers) -}}
{{- range $field := list "spec.templates" "spec.templates[0].dag.tasks" }}{{ $count := index $counts $field }}{{ if gt (int $count) (int
      $plan.catalog.argoFullCrdMaxItems) -}}
{{- $wrappers := ternary " (a container template and, under failurePolicy.recovery node, a retry wrapper each)" "" (and (eq $field "spec.templates") (not
      (empty $plan.nodeRetry))) -}}
{{- $planProblems = append $planProblems (include "torchdag.problem" (list $plan.catalog "templates-too-many" "nodes" (dict "shapes" (len $plan.shapes) "count"
      $count "field" $field "limit" (int $plan.catalog.argoFullCrdMaxItems) "wrappers" $wrappers))) -}}
{{- end }}{{ end -}}
{{- with $planProblems }}{{ fail (printf "invalid values (%d problem%s):\n%s" (len .) (ternary "" "s" (eq (len .) 1)) (join "\n" .)) }}{{ end -}}
{{- $v := $root.Values -}}
{{- $workflow := $v.workflow -}}
{{- include "torchdag.summaryComment" (dict "plan" $plan "values" $v) }}
apiVersion: argoproj.io/v1alpha1
kind: {{ $v.kind }}
metadata:
  name: {{ include "torchdag.fullname" $root | toJson }}
  namespace: {{ include "torchdag.namespace" $root | toJson }}
  labels:
    {{- /* helm's labels, then the job's (user labels win, as on render.py's Workflow) */}}
    {{- $metadataLabels := include "torchdag.labels" $root | fromYaml }}
    {{- range $key, $value := $plan.labels }}
    {{- $_ := set $metadataLabels $key $value }}
    {{- end }}
    {{- range $key, $value := $metadataLabels }}
    {{ toJson $key }}: {{ toJson $value }}
    {{- end }}
  {{- with $v.annotations }}
  annotations:
    {{- range $key, $value := . }}
    {{ toJson $key }}: {{ toJson $value }}
    {{- end }}
  {{- end }}
spec:
  entrypoint: {{ toJson $plan.catalog.entrypoint }}
  {{- with $v.timeouts.workflowDeadline }}
  activeDeadlineSeconds: {{ int64 . }}
  {{- end }}
  {{- with $workflow.ttlSecondsAfterFinished }}
  ttlStrategy:
    secondsAfterCompletion: {{ int64 . }}
  {{- end }}
  {{- with $workflow.podGC }}
  podGC:
    strategy: {{ toJson . }}
  {{- end }}
  {{- with $v.serviceAccountName }}
  serviceAccountName: {{ toJson . }}
  {{- end }}
  {{- if not $v.automountServiceAccountToken }}
  automountServiceAccountToken: false
  {{- end }}
  {{- with $v.executorServiceAccountName }}
  executor:
    serviceAccountName: {{ toJson . }}
  {{- end }}
  {{- if not $plan.network }}
  hostNetwork: true
  dnsPolicy: "ClusterFirstWithHostNet"
  {{- end }}
  {{- with $workflow.priorityClassName }}
  podPriorityClassName: {{ toJson . }}
  {{- end }}
  {{- $restricted := eq $v.podSecurity "restricted" }}
  {{- if or $v.securityContext $restricted }}
  {{- range $context := list ($v.securityContext | default dict) }}
  securityContext:
    {{- range $key := list "runAsUser" "runAsGroup" "fsGroup" }}
    {{- if hasKey $context $key }}
    {{ $key }}: {{ int64 (index $context $key) }}
    {{- end }}
    {{- end }}
    {{- if or (hasKey . "runAsNonRoot") $restricted }}
    runAsNonRoot: {{ ternary .runAsNonRoot true (hasKey . "runAsNonRoot") | toJson }}
    {{- end }}
    {{- if hasKey . "supplementalGroups" }}
    {{- $groups := list }}
    {{- range .supplementalGroups }}
    {{- $groups = append $groups (printf "%d" (int64 .)) }}
    {{- end }}
    supplementalGroups: [{{ join ", " $groups }}]
    {{- end }}
    {{- if $restricted }}
    # Pod Security restricted: for Argo's own containers too (init, wait).
    seccompProfile:
      type: "RuntimeDefault"
    {{- end }}
  {{- end }}
  {{- end }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
  {{- range . }}
  - name: {{ toJson . }}
  {{- end }}
  {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- range $key, $value := . }}
    {{ toJson $key }}: {{ toJson $value }}
    {{- end }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
  {{- range . }}
  - {{ include "torchdag.toleration" . }}
  {{- end }}
  {{- end }}
  {{- if eq $v.kind "WorkflowTemplate" }}
  # A run submitted from the template takes its labels and annotations from here only.
  workflowMetadata:
    labels:
      {{- range $key, $value := $plan.labels }}
      {{ toJson $key }}: {{ toJson $value }}
      {{- end }}
    {{- with $v.annotations }}
    annotations:
      {{- range $key, $value := . }}
      {{ toJson $key }}: {{ toJson $value }}
      {{- end }}
    {{- end }}
  {{- end }}
  podMetadata:
    labels:
      {{- range $key, $value := $plan.labels }}
      {{ toJson $key }}: {{ toJson $value }}
      {{- end }}
    {{- with $v.annotations }}
    annotations:
      {{- range $key, $value := . }}
      {{ toJson $key }}: {{ toJson $value }}
      {{- end }}
    {{- end }}
  {{- with $plan.volumes }}
  volumes:
  {{- range . }}
  - name: {{ toJson .name }}
    {{- if .emptyDir }}
    emptyDir:
      medium: {{ toJson .emptyDir.medium }}
      sizeLimit: {{ toJson .emptyDir.sizeLimit }}
    {{- else if .configMap }}
    configMap:
      name: {{ toJson .configMap.name }}
    {{- else if .hostPath }}
    hostPath:
      path: {{ toJson .hostPath.path }}
      {{- if hasKey .hostPath "type" }}
      type: {{ toJson .hostPath.type }}
      {{- end }}
    {{- else }}
    persistentVolumeClaim:
      claimName: {{ toJson .persistentVolumeClaim.claimName }}
      {{- if .persistentVolumeClaim.readOnly }}
      readOnly: true
      {{- end }}
    {{- end }}
  {{- end }}
  {{- end }}
  templates:
  - name: {{ toJson $plan.catalog.entrypoint }}
    {{- with $plan.retry }}
    retryStrategy:
      limit: {{ toJson .limit }}
      retryPolicy: {{ toJson .retryPolicy }}
      backoff:
        duration: {{ toJson .backoff.duration }}
        factor: {{ toJson .backoff.factor }}
        {{- with .backoff.cap }}
        cap: {{ toJson . }}
        {{- end }}
    {{- end }}
    dag:
      failFast: true
      tasks:
      {{- $podGroup := and $plan.gang $plan.gang.manifest }}
      {{- if $plan.gang }}
      {{- if $podGroup }}
      - name: {{ toJson $plan.gang.task }}
        template: {{ toJson $plan.gang.task }}
      {{- end }}
      - name: {{ toJson $plan.watch.task }}
        template: {{ toJson $plan.watch.task }}
        # Its pod lost with its host (Error): the job goes on without the watch.
        continueOn:
          error: {{ toJson $plan.catalog.watch.continueOn.error }}
        {{- include "torchdag.agentsDepends" $plan }}
      {{- end }}
      {{- with $plan.network }}
      - name: {{ toJson .task }}
        template: {{ toJson .task }}
      {{- end }}
      {{- if not $plan.loops }}
      {{- range $plan.nodes }}
      - name: {{ toJson .task }}
        {{- include "torchdag.nodeTask" (dict "plan" $plan "shape" .shape "arguments" .arguments "elastic" (ge (int .rank) (int $plan.elasticFrom))) }}
      {{- end }}
      {{- else }}
      # A task per group of machines of one template, an item per machine (withItems): a task
      # per machine would pass the tasks Argo's full CRDs allow in a DAG.
      {{- range $plan.loops }}
      - name: {{ toJson .task }}
        {{- include "torchdag.nodeTask" (dict "plan" $plan "shape" .shape "arguments" .arguments "elastic" .elastic) }}
        withItems:
        {{- range .items }}
        - {{ . }}
        {{- end }}
      {{- end }}
      {{- end }}
      {{- if not $plan.gang }}
      - name: {{ toJson $plan.watch.task }}
        template: {{ toJson $plan.watch.task }}
        # Its pod lost with its host (Error): the job goes on without the watch.
        continueOn:
          error: {{ toJson $plan.catalog.watch.continueOn.error }}
        {{- include "torchdag.agentsDepends" $plan }}
      {{- end }}
      {{- include "torchdag.agentsTask" $plan }}
  {{- if and $plan.gang $plan.gang.manifest }}
  # The job's one gang: created before any training pod, deleted with the Workflow.
  - name: {{ toJson $plan.gang.task }}
    resource:
      action: "apply"
      setOwnerReference: true
      manifest: |
        {{- range $plan.gang.manifest }}
        {{ . }}
        {{- end }}
  {{- end }}
  {{- if $plan.gang }}
  {{- include "torchdag.watchTemplate" (dict "plan" $plan "v" $v) }}
  {{- end }}
  {{- with $plan.network }}
  # The run's headless Service: a DNS name per node pod (node-<rank>.<run>), deleted with the Workflow.
  - name: {{ toJson .task }}
    resource:
      action: "apply"
      setOwnerReference: true
      manifest: |
        {{- range .manifest }}
        {{ . }}
        {{- end }}
  {{- end }}
  {{- include "torchdag.nodeRetry" (dict "plan" $plan "values" $v) }}
  {{- range $shape := $plan.shapes }}
  - name: {{ toJson $shape.name }}
    {{- with $plan.schedulerName }}
    schedulerName: {{ toJson . }}
    {{- end }}
    inputs:
      parameters:
      {{- range $shape.parameters }}
      - name: {{ toJson . }}
      {{- end }}
    metadata:
      {{- if and $plan.gang $plan.gang.annotations }}
      annotations:
        {{- range $plan.gang.annotations }}
        {{ index . 0 | toJson }}: {{ index . 1 | toJson }}
        {{- end }}
        {{- with $plan.gang.roleAnnotation }}
        {{ toJson . }}: {{ toJson $shape.name }}
        {{- end }}
      {{- end }}
      labels:
        {{- if $plan.gang }}
        {{- range $plan.gang.labels }}
        {{ index . 0 | toJson }}: {{ index . 1 | toJson }}
        {{- end }}
        {{- end }}
        {{ toJson $plan.catalog.labels.nodeRank }}: {{ index $plan.inputs "node-rank" | toJson }}
        {{- range $key, $value := $shape.labels }}
        {{ toJson $key }}: {{ toJson $value }}
        {{- end }}
        {{- with $plan.network }}
        {{ index .label 0 | toJson }}: {{ index .label 1 | toJson }}
    podSpecPatch: |
      {{- range .patch }}
      {{ . }}
      {{- end }}
        {{- end }}
    {{- with $shape.podSecurity }}
    # Ascend device files are HwHiAiUser's, mode 0660: its group opens them with every capability dropped.
    securityContext:
      {{- range . }}
      {{ . }}
      {{- end }}
    {{- end }}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - key: {{ toJson $plan.catalog.hostLabel }}
              operator: "In"
              values:
              - {{ index $plan.inputs "host" | toJson }}
    container:
      image: {{ toJson $v.image }}
      imagePullPolicy: {{ toJson $v.imagePullPolicy }}
      {{- if $shape.setEnv }}
      # Source CANN's environment, then exec the rest with its arguments untouched (no re-parsing).
      {{- end }}
      command:
      {{- range $shape.command }}
      - {{ toJson . }}
      {{- end }}
      args:
      {{- range $shape.args }}
      - {{ toJson . }}
      {{- end }}
      {{- with $v.workingDir }}
      workingDir: {{ toJson . }}
      {{- end }}
      {{- include "torchdag.containerSecurity" $plan.security }}
      env:
      {{- range $shape.fieldEnv }}
      - name: {{ index . 0 | toJson }}
        valueFrom:
          fieldRef:
            fieldPath: {{ index . 1 | toJson }}
      {{- end }}
      {{- range $shape.env }}
      - name: {{ index . 0 | toJson }}
        value: {{ index . 1 | toJson }}
      {{- end }}
      {{- with $shape.resources }}
      resources:
        {{- range $section := list "requests" "limits" }}
        {{- with index $shape.resources $section }}
        {{ $section }}:
          {{- range $key, $value := . }}
          {{ toJson $key }}: {{ toJson $value }}
          {{- end }}
        {{- end }}
        {{- end }}
      {{- end }}
      {{- with $shape.mounts }}
      volumeMounts:
      {{- range . }}
      - name: {{ toJson .name }}
        mountPath: {{ toJson .mountPath }}
        {{- if .readOnly }}
        readOnly: true
        {{- end }}
      {{- end }}
      {{- end }}
  {{- end }}
  {{- if not $plan.gang }}
  {{- include "torchdag.watchTemplate" (dict "plan" $plan "v" $v) }}
  {{- end }}
  {{- include "torchdag.agentsTemplate" $plan }}
{{- end -}}

{{/* The container_security macro of workflow.yaml.j2: $plan.security at a container's indentation. */}}
{{- define "torchdag.containerSecurity" }}
      securityContext:
        allowPrivilegeEscalation: {{ toJson .allowPrivilegeEscalation }}
        {{- with .capabilities }}
        capabilities:
          {{- range $part := list "drop" "add" }}
          {{- with index $.capabilities $part }}
          {{ $part }}:
          {{- range . }}
          - {{ toJson . }}
          {{- end }}
          {{- end }}
          {{- end }}
        {{- end }}
        {{- with .seccompProfile }}
        seccompProfile:
          type: {{ toJson . }}
        {{- end }}
{{- end -}}
