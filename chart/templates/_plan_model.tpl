{{/* torchdag/plan_model.py's twin: the typed Plan's records, as the chart computes them. */}}

{{/*
torchdag/plan_model.py's typed_plan(): the typed Plan as JSON, the fields and units of
`torchdag plan FILE --json`, restated from what torchdag.plan decided (nothing is decided
here). templates/plan.yaml prints it for `helm template ... --api-versions torchdag.io/plan`.
Takes (dict "plan" $plan "values" $v), $plan filled by torchdag.plan.
*/}}
{{- define "torchdag.typedPlan" -}}
{{- $plan := .plan }}{{ $v := .values }}{{ $cat := $plan.catalog -}}
{{- $elasticFrom := int $plan.elasticFrom -}}
{{- $nodes := list }}{{ $ranks := dict -}}
{{- range $_, $node := $plan.nodes -}}
{{- $rank := int $node.rank }}{{ $shape := $node.shape -}}
{{- $nodes = append $nodes (dict "rank" $rank "index" $node.index "task" $node.task "host" $node.name "address" $node.address "nic" ($node.nic | default nil)
      "shape" $shape.name "accelerator" $node.accelerator "device" $shape.device "devices" $node.devices "master" (eq $rank 0) "elastic" (ge $rank
      $elasticFrom) "if_ip" $shape.ifIp "labels" $shape.labels) -}}
{{- $_ := set $ranks $shape.name (append (get $ranks $shape.name | default list) $rank) -}}
{{- end -}}
{{- $shapes := list -}}
{{- range $shape := $plan.shapes -}}
{{- /* the accelerator's extended resource as a name and a count, apart from cpu and memory */ -}}
{{- $resource := index ($v.resourceNames | default dict) $shape.accelerator | default (index $cat.kinds $shape.accelerator).resource | default "" -}}
{{- $limits := $shape.resources.limits | default dict -}}
{{- $count := ternary (int64 (get $limits $resource)) 0 (hasKey $limits $resource) -}}
{{- $resources := dict "requests" ($shape.resources.requests | default dict) "limits" (omit $limits $resource) "accelerator_resource" (ternary $resource nil
      (gt $count 0)) "accelerator_count" $count -}}
{{- $shapes = append $shapes (dict "name" $shape.name "accelerator" $shape.accelerator "device" $shape.device "devices" $shape.devices "resources" $resources
      "ranks" (get $ranks $shape.name | default list) "set_env_script" (ternary $v.ascend.setEnvScript nil (not (empty $shape.setEnv))) "labels"
      $shape.labels) -}}
{{- end -}}
{{- $retry := dict -}}
{{- with $plan.retryPolicy }}{{ $retry = dict "limit" .limit "recovery" .recovery "retry_policy" .retryPolicy "backoff_seconds" .backoffSeconds "factor"
      .factor "cap_seconds" .capSeconds }}{{ end -}}
{{- $gang := dict -}}
{{- with $plan.gang }}{{ $gang = dict "kind" .kind "scheduler_name" .schedulerName "group" $cat.gangName "count" (len $plan.nodes) "min_member" $elasticFrom
      "queue" ($v.scheduling.queue | default nil) "timeout_seconds" (int64 $v.scheduling.timeout) "pod_group" (not (empty .manifest)) }}{{ end -}}
{{- $pod := not (empty $plan.network) -}}
{{- $network := dict "mode" (ternary "pod" "host" $pod) "cluster_domain" $v.network.clusterDomain "service" $pod "default_nic" (ternary $v.network.nic nil
      $pod) -}}
{{- $helpers := dict "from_workflow" (not (empty $v.agents.fromWorkflow)) "path" $cat.agents.path "files" ($plan.agents.files | default list) -}}
{{- $timeouts := $v.timeouts -}}
{{- $job := dict "name" $v.name "kind" $v.kind "namespace" ($v.namespace | default nil) "service_account" ($v.serviceAccountName | default nil) -}}
{{- range $field, $value := dict "node_selector" ($v.nodeSelector | default dict) "tolerations" ($v.tolerations | default list) "image" $v.image "script"
      $v.script "args" ($v.args | default list) "working_dir" ($v.workingDir | default nil) "labels" $plan.labels "backend" $plan.backend "backend_reason"
      $plan.backendReason "nnodes" (len $plan.nodes) "world_size" $plan.worldSize "min_nodes" $elasticFrom "port" (int64 $v.port) "master_host"
      $plan.master.name "master_address" $plan.masterAddress "scheduler_name" ($plan.schedulerName | default nil) "scheduling_timeout_seconds" (int64
      $v.scheduling.timeout) "node_status_offload" (not (empty $v.workflow.nodeStatusOffload)) }}{{ $_ := set $job $field $value }}{{ end -}}
{{- $workflow := $v.workflow -}}
{{- range $field, $value := dict "executor_service_account" ($v.executorServiceAccountName | default nil) "automount_service_account_token" (not (empty
      $v.automountServiceAccountToken)) "annotations" ($v.annotations | default dict) "image_pull_policy" $v.imagePullPolicy "image_pull_secrets"
      ($v.imagePullSecrets | default list) "pod_gc" ($workflow.podGC | default nil) "priority_class_name" ($workflow.priorityClassName | default nil)
      "ttl_seconds_after_finished" (ternary nil (int64 $workflow.ttlSecondsAfterFinished) (empty $workflow.ttlSecondsAfterFinished)) -}}
{{- $_ := set $job $field $value -}}
{{- end -}}
{{- /* plan_model.pod_security: the pods' securityContext as numbers; restricted asks runAsNonRoot unless the values say */ -}}
{{- $context := $v.securityContext | default dict }}{{ $restricted := eq $v.podSecurity "restricted" -}}
{{- $security := dict "level" $v.podSecurity "run_as_non_root" (ternary $context.runAsNonRoot (ternary true nil $restricted) (hasKey $context
      "runAsNonRoot")) -}}
{{- range $field, $key := dict "run_as_user" "runAsUser" "run_as_group" "runAsGroup" "fs_group" "fsGroup" -}}
{{- $value := index $context $key }}{{ $_ := set $security $field (ternary nil (int64 $value) (kindIs "invalid" $value)) -}}
{{- end -}}
{{- $groups := list }}{{ range $context.supplementalGroups }}{{ $groups = append $groups (int64 .) }}{{ end -}}
{{- $_ := set $security "supplemental_groups" (ternary nil $groups (kindIs "invalid" $context.supplementalGroups)) -}}
{{- $_ := set $job "security" $security -}}
{{- /* timeouts as whole seconds, null where unset (0 or null) */ -}}
{{- range $field, $key := dict "deadline_seconds" "workflowDeadline" "rendezvous_seconds" "rendezvous" "process_group_seconds" "processGroup" -}}
{{- $seconds := index $timeouts $key }}{{ $_ := set $job $field (ternary nil (int64 $seconds) (empty $seconds)) -}}
{{- end -}}
{{- toJson (dict "job" $job "nodes" $nodes "shapes" $shapes "retry" ($retry | default nil) "gang" ($gang | default nil) "network" $network "helpers"
      $helpers) -}}
{{- end -}}

{{/* plan_model.retry_policy(): failurePolicy as numbers, as JSON ({} without restarts). With no Workflow deadline Argo's cap bounds the
doubling waits (catalogue restartBackoffCapSeconds, or the first wait if longer). Takes (dict "values" "catalog"). */}}
{{- define "torchdag.retryPolicy" -}}
{{- $policy := .values.failurePolicy }}{{ $strategy := .catalog.restartStrategy }}{{ $backoff := int64 $policy.backoffSeconds -}}
{{- $cap := ternary nil (max (int64 .catalog.restartBackoffCapSeconds) $backoff) (not (empty .values.timeouts.workflowDeadline)) -}}
{{- toJson (ternary (dict "limit" (int64 $policy.maxRestarts) "recovery" $policy.recovery "retryPolicy" $strategy.retryPolicy "backoffSeconds" $backoff
      "factor" (int64 $strategy.factor) "capSeconds" $cap) dict (gt (int64 $policy.maxRestarts) 0)) -}}
{{- end -}}
