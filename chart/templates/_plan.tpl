{{/*
torchdag.plan: torchdag/plan.py's make_plan() for the chart. It fills .plan with the lists
templates/workflow.yaml prints, computed from the values and the accelerator catalogue
(_catalog.tpl, generated from torchdag/catalog.yaml) exactly as Python computes them:
  nodes    in rank order (the master first, then the others as listed): task, shape, arguments
  shapes   one container template per distinct accelerator, devices, resources, NIC mode and
           HCCL_IF_IP: name, parameters, command, args, env, resources, mounts
  volumes  the pod volumes; master, backend, backendReason, worldSize.
Every string is already what the Workflow holds (Kubernetes' `$$` escaping applied).
It validates first, so it only ever plans valid values.
Usage: include "torchdag.plan" (dict "root" $ "plan" $plan)
*/}}
{{- define "torchdag.plan" -}}
{{- $cat := include "torchdag.catalog" .root | fromJson -}}
{{- include "torchdag.validate" (dict "root" .root "catalog" $cat) -}}
{{- $v := .root.Values -}}
{{- $plan := .plan -}}
{{- $nodes := $v.nodes -}}
{{- $ascendValues := $v.ascend -}}
{{- $preflight := $v.preflight -}}
{{- $launcher := $v.launcher -}}
{{- $timeouts := $v.timeouts -}}
{{- $port := int64 $v.port -}}
{{- $restarts := int64 ($v.failurePolicy.maxRestarts | default 0) -}}

{{- $masterIndex := 0 -}}
{{- range $index, $node := $nodes -}}
{{- if $node.master -}}
{{- $masterIndex = $index -}}
{{- break -}}
{{- end -}}
{{- end -}}
{{- $masterNode := index $nodes $masterIndex -}}
{{- $masterAddress := $masterNode.address | default $masterNode.name -}}

{{- /* plan.resolve_backend */ -}}
{{- $backend := $v.backend -}}
{{- $reason := "set in the values file" -}}
{{- if eq $backend "auto" -}}
{{- $kind := (index $nodes 0).accelerator | default "cpu" -}}
{{- $entry := include "torchdag.accelerator" (dict "catalog" $cat "kind" $kind) | fromJson -}}
{{- $backend = $entry.backend -}}
{{- $reason = printf "auto: %s nodes" $kind -}}
{{- if and (eq $entry.backend "hccl") (ne $entry.hccl "cluster") -}}
{{- if eq $entry.hccl "none" -}}
{{- $backend = "gloo" -}}
{{- $reason = printf "auto: %s has no HCCL collectives, so gloo" $kind -}}
{{- else if gt (len $nodes) 1 -}}
{{- $backend = "gloo" -}}
{{- $reason = printf "auto: HCCL on %s works within one server only, so gloo across nodes" $kind -}}
{{- else if not $ascendValues.duoCard -}}
{{- $backend = "gloo" -}}
{{- $reason = printf "auto: HCCL on %s needs an Atlas 300I Duo card (ascend.duoCard), so gloo" $kind -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- $mountsDriver := false -}}
{{- if $ascendValues.mountDriver -}}
{{- range $node := $nodes -}}
{{- if (index $cat.devices (index $cat.accelerators ($node.accelerator | default "cpu")).device).ascend -}}
{{- $mountsDriver = true -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The job-wide parts of every container (plan._ShapeBuilder.__init__) */ -}}
{{- $launcherWords := list "torchrun" -}}
{{- if eq $launcher.type "launch" -}}
{{- $launcherWords = list ($launcher.python | default "python3") "-m" "torch.distributed.launch" -}}
{{- end -}}
{{- $userEnv := list -}}
{{- range $name, $value := $v.env -}}
{{- $userEnv = append $userEnv (list $name (replace "$" "$$" $value)) -}}
{{- end -}}
{{- /* torchrun's ${local_rank} macro and Kubernetes' $(VAR) each read $$ as $: escape twice */ -}}
{{- /* (on the JSON text, where `$` only occurs inside strings: appending arg by arg is quadratic) */ -}}
{{- $scriptArgs := replace "$" "$$$$" (toJson (prepend ($v.args | default list) $v.script)) | fromJsonArray -}}
{{- $extraArgs := replace "$" "$$" (toJson ($launcher.extraArgs | default list)) | fromJsonArray -}}
{{- $mounts := list -}}
{{- if $v.shmSize -}}
{{- $mounts = append $mounts (dict "name" $cat.shmVolume.name "mountPath" $cat.shmVolume.mountPath) -}}
{{- end -}}
{{- $driverMounts := list -}}
{{- if $mountsDriver -}}
{{- range $cat.ascendMounts -}}
{{- $driverMounts = append $driverMounts (dict "name" .name "mountPath" .mountPath "readOnly" true) -}}
{{- end -}}
{{- end -}}
{{- $userMounts := list -}}
{{- range $v.volumes -}}
{{- $mount := dict "name" .name "mountPath" .mountPath -}}
{{- if .readOnly -}}
{{- $_ := set $mount "readOnly" true -}}
{{- end -}}
{{- $userMounts = append $userMounts $mount -}}
{{- end -}}

{{- /* once per kind and per resources, not per node: a 4,096-node job stays fast */ -}}
{{- $entryByKind := dict -}}
{{- range $kind, $_ := $cat.accelerators -}}
{{- $_ := set $entryByKind $kind (include "torchdag.accelerator" (dict "catalog" $cat "kind" $kind) | fromJson) -}}
{{- end -}}
{{- $resourcesByKey := dict -}}
{{- $shapes := list -}}
{{- $shapeByKey := dict -}}
{{- $byBase := dict -}}
{{- /* nodes in rank order: the master, then the others as listed. Kept in a dict keyed by
       the zero-padded rank (templates range over a dict in key order): appending to a list
       copies it, which is quadratic in the number of nodes. */ -}}
{{- $planned := dict -}}
{{- $worldSize := 0 -}}
{{- $rank := 0 -}}
{{- range $pass := list "master" "others" -}}
{{- range $index, $node := $nodes -}}
{{- if eq (eq $index $masterIndex) (eq $pass "master") -}}
{{- $kind := $node.accelerator | default "cpu" -}}
{{- $entry := index $entryByKind $kind -}}
{{- $devices := int64 ($node.devices | default 1) -}}
{{- $address := $node.address | default $node.name -}}
{{- $nic := $node.nic | default "" -}}
{{- $nicMode := "named" -}}
{{- if not $nic -}}
{{- $nicMode = "none" -}}
{{- else if eq $nic "auto" -}}
{{- $nicMode = "auto" -}}
{{- end -}}
{{- $hasIfIp := and (ne $entry.addressEnv "") (regexMatch $cat.ipv4 $address) -}}
{{- $resourcesKey := printf "%s|%d|%s" $kind $devices (ternary (toJson $node.resources) "-" (hasKey $node "resources")) -}}
{{- if not (hasKey $resourcesByKey $resourcesKey) -}}
{{- $_ := set $resourcesByKey $resourcesKey (include "torchdag.resources" (dict "node" $node "values" $v "entry" $entry "kind" $kind "devices" $devices) | fromJson) -}}
{{- end -}}
{{- $resources := index $resourcesByKey $resourcesKey -}}
{{- $key := printf "%s|%d|%s|%s|%t" $kind $devices (toJson $resources) $nicMode $hasIfIp -}}
{{- if not (hasKey $shapeByKey $key) -}}

{{- /* the name comes after every shape is known (plan._shape_names) */ -}}
{{- $base := printf "%s-x%d" $kind $devices -}}
{{- $features := list -}}
{{- if eq $nicMode "auto" -}}
{{- $features = append $features "nic-auto" -}}
{{- else if eq $nicMode "none" -}}
{{- $features = append $features "no-nic" -}}
{{- end -}}
{{- if and $entry.ascend (not $hasIfIp) -}}
{{- $features = append $features "no-if-ip" -}}
{{- end -}}
{{- if hasKey $node "resources" -}}
{{- $features = append $features "own-resources" -}}
{{- end -}}
{{- $_ := set $byBase $base (add1 (get $byBase $base | default 0)) -}}
{{- $parameters := list "host" "node-rank" -}}
{{- if eq $nicMode "named" -}}
{{- $parameters = append $parameters "nic" -}}
{{- end -}}
{{- if $hasIfIp -}}
{{- $parameters = append $parameters "if-ip" -}}
{{- end -}}
{{- if $restarts -}}
{{- $parameters = append $parameters "restart" -}}
{{- end -}}

{{- /* plan._ShapeBuilder.command */ -}}
{{- $setEnv := and $entry.ascend $ascendValues.setEnvScript -}}
{{- $command := list -}}
{{- if $setEnv -}}
{{- $command = list "/bin/bash" "-c" $cat.setEnvWrapper "torchdag-set-env" (replace "$" "$$" $ascendValues.setEnvScript) -}}
{{- end -}}
{{- if or $preflight.enabled (eq $nicMode "auto") -}}
{{- range $preflight.command -}}
{{- $command = append $command (replace "$" "$$" .) -}}
{{- end -}}
{{- $command = concat $command (list
  (printf "--master-addr=%s" $masterAddress)
  (printf "--master-port=%d" $port)
  "--node-rank={{inputs.parameters.node-rank}}"
  (printf "--nproc-per-node=%d" $devices)) -}}
{{- if eq $nicMode "named" -}}
{{- $command = append $command "--nic={{inputs.parameters.nic}}" -}}
{{- else if eq $nicMode "auto" -}}
{{- $command = append $command "--nic=auto" -}}
{{- end -}}
{{- $command = concat $command (list (printf "--device=%s" $entry.device) (printf "--timeout=%d" (int64 ($preflight.timeout | default 120))) "--exec") -}}
{{- end -}}
{{- range $launcherWords -}}
{{- $command = append $command (replace "$" "$$" .) -}}
{{- end -}}

{{- /* plan._ShapeBuilder.args */ -}}
{{- $args := list
  (printf "--nnodes=%d" (len $nodes))
  "--node_rank={{inputs.parameters.node-rank}}"
  (printf "--nproc_per_node=%d" $devices)
  (printf "--master_addr=%s" (replace "$" "$$" $masterAddress))
  (printf "--master_port=%d" $port) -}}
{{- if not (kindIs "invalid" $launcher.maxRestarts) -}}
{{- $args = append $args (printf "--max_restarts=%d" (int64 $launcher.maxRestarts)) -}}
{{- end -}}
{{- with $timeouts.rendezvous -}}
{{- $args = append $args (printf "--rdzv_conf=timeout=%d" (int64 .)) -}}
{{- end -}}
{{- $args = concat $args $extraArgs $scriptArgs -}}

{{- /* plan._ShapeBuilder.env */ -}}
{{- $env := list (list "PYTHONUNBUFFERED" "1") (list "TORCHDAG_BACKEND" $backend) (list "TORCHDAG_DEVICE" $entry.device) -}}
{{- with $timeouts.processGroup -}}
{{- $env = append $env (list "TORCHDAG_PG_TIMEOUT" (printf "%d" (int64 .))) -}}
{{- end -}}
{{- if $restarts -}}
{{- $env = append $env (list "TORCHDAG_RESTART" "{{inputs.parameters.restart}}") -}}
{{- end -}}
{{- $env = concat $env $entry.env -}}
{{- if eq $nicMode "named" -}}
{{- range $entry.nicEnv -}}
{{- $env = append $env (list (index . 0) (printf "%s{{inputs.parameters.nic}}" (index . 1))) -}}
{{- end -}}
{{- end -}}
{{- if $entry.ascend -}}
{{- if $hasIfIp -}}
{{- $env = append $env (list $entry.addressEnv "{{inputs.parameters.if-ip}}") -}}
{{- end -}}
{{- with $timeouts.hcclConnect -}}
{{- $env = append $env (list "HCCL_CONNECT_TIMEOUT" (printf "%d" (int64 .))) -}}
{{- end -}}
{{- with $timeouts.processGroup -}}
{{- $env = append $env (list "HCCL_EXEC_TIMEOUT" (include "torchdag.hcclExecTimeout" (dict "catalog" $cat "seconds" .))) -}}
{{- end -}}
{{- if $ascendValues.whitelistDisable -}}
{{- $env = append $env (list "HCCL_WHITELIST_DISABLE" "1") -}}
{{- end -}}
{{- end -}}
{{- $env = concat $env $userEnv -}}

{{- $shapeMounts := $mounts -}}
{{- if $entry.ascend -}}
{{- $shapeMounts = concat $shapeMounts $driverMounts -}}
{{- end -}}
{{- $shapeMounts = concat $shapeMounts $userMounts -}}
{{- $shape := dict "base" $base "features" $features "accelerator" $kind "device" $entry.device "devices" $devices "parameters" $parameters "command" $command "args" $args "env" $env "resources" $resources "mounts" $shapeMounts "setEnv" $setEnv -}}
{{- $_ := set $shapeByKey $key $shape -}}
{{- $shapes = append $shapes $shape -}}
{{- end -}}
{{- $shape := index $shapeByKey $key -}}

{{- $facts := dict "host" $node.name "node-rank" (toString $rank) "nic" $nic "if-ip" $address "restart" "{{retries}}" -}}
{{- $arguments := list -}}
{{- range $parameter := $shape.parameters -}}
{{- $arguments = append $arguments (list $parameter (index $facts $parameter)) -}}
{{- end -}}
{{- $_ := set $planned (printf "%08d" $rank) (dict "task" (printf "node-%d" $rank) "rank" $rank "name" $node.name "address" $address "nic" $nic "accelerator" $kind "devices" $devices "shape" $shape "arguments" $arguments) -}}
{{- $worldSize = add $worldSize $devices -}}
{{- $rank = add1 $rank -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* plan._shape_names */ -}}
{{- $taken := dict -}}
{{- range $shape := $shapes -}}
{{- $name := $shape.base -}}
{{- if gt (int (get $byBase $name)) 1 -}}
{{- $name = join "-" (prepend $shape.features $name) -}}
{{- end -}}
{{- $count := add1 (get $taken $name | default 0) -}}
{{- $_ := set $taken $name $count -}}
{{- if gt $count 1 -}}
{{- $name = printf "%s-%d" $name $count -}}
{{- end -}}
{{- $_ := set $shape "name" $name -}}
{{- end -}}

{{- /* plan._volumes */ -}}
{{- $volumes := list -}}
{{- if $v.shmSize -}}
{{- $volumes = append $volumes (dict "name" $cat.shmVolume.name "emptyDir" (dict "medium" "Memory" "sizeLimit" (include "torchdag.quantity" $v.shmSize))) -}}
{{- end -}}
{{- if $mountsDriver -}}
{{- $driver := regexReplaceAll "/+$" ($ascendValues.driverPath | default "/usr/local/Ascend/driver") "" -}}
{{- range $cat.ascendMounts -}}
{{- $volumes = append $volumes (dict "name" .name "hostPath" (dict "path" (replace "{driver}" $driver .hostPath) "type" .type)) -}}
{{- end -}}
{{- end -}}
{{- range $v.volumes -}}
{{- if .hostPath -}}
{{- $host := dict "path" .hostPath.path -}}
{{- with .hostPath.type -}}
{{- $_ := set $host "type" . -}}
{{- end -}}
{{- $volumes = append $volumes (dict "name" .name "hostPath" $host) -}}
{{- else -}}
{{- $claim := dict "claimName" .persistentVolumeClaim.claimName -}}
{{- if .readOnly -}}
{{- $_ := set $claim "readOnly" true -}}
{{- end -}}
{{- $volumes = append $volumes (dict "name" .name "persistentVolumeClaim" $claim) -}}
{{- end -}}
{{- end -}}

{{- $labels := dict "torchdag.io/job" $v.name -}}
{{- range $key, $value := $v.labels -}}
{{- $_ := set $labels $key $value -}}
{{- end -}}
{{- /* plan._retry_strategy: whole-job restarts */ -}}
{{- if $restarts -}}
{{- $_ := set $plan "retry" (dict "limit" (toString $restarts) "retryPolicy" "Always" "backoff" (dict "duration" (printf "%ds" (int64 $v.failurePolicy.backoffSeconds)) "factor" "2")) -}}
{{- end -}}
{{- /* plan._gang: what every training pod carries to join the one gang, and the PodGroup manifest */ -}}
{{- $scheduling := $v.scheduling -}}
{{- if ne ($scheduling.gang | default "none") "none" -}}
{{- $entry := index $cat.gangs $scheduling.gang -}}
{{- $group := "{{workflow.name}}" -}}
{{- $fill := dict "{group}" $group "{count}" (toString (len $planned)) "{queue}" ($scheduling.queue | default "") -}}
{{- $watch := list -}}
{{- range (concat $scheduling.watchCommand (list (printf "--workflow=%s" $group) "--namespace={{workflow.namespace}}" (printf "--pods=%d" (len $planned)) (printf "--timeout=%d" (int64 $scheduling.timeout)))) -}}
{{- $watch = append $watch (replace "$" "$$" .) -}}
{{- end -}}
{{- $gang := dict "kind" $scheduling.gang "schedulerName" ($scheduling.schedulerName | default $entry.schedulerName) "watch" $watch -}}
{{- range $field, $source := dict "labels" $entry.podLabels "annotations" $entry.podAnnotations -}}
{{- $pairs := list -}}
{{- range $key, $value := $source -}}
{{- range $placeholder, $text := $fill -}}
{{- $value = replace $placeholder $text $value -}}
{{- end -}}
{{- $pairs = append $pairs (list $key $value) -}}
{{- end -}}
{{- $_ := set $gang $field $pairs -}}
{{- end -}}
{{- if $entry.podGroup -}}
{{- $spec := list (printf "minMember: %d" (len $planned)) -}}
{{- if eq $scheduling.gang "volcano" -}}
{{- with $scheduling.queue -}}
{{- $spec = append $spec (printf "queue: %s" (toJson .)) -}}
{{- end -}}
{{- with $v.workflow.priorityClassName -}}
{{- $spec = append $spec (printf "priorityClassName: %s" (toJson .)) -}}
{{- end -}}
{{- $totals := dict -}}
{{- range $_, $node := $planned -}}
{{- $name := index ($v.resourceNames | default dict) $node.accelerator | default (index $cat.accelerators .accelerator).resource -}}
{{- if $name -}}
{{- $_ := set $totals $name (add (get $totals $name | default 0) $node.devices) -}}
{{- end -}}
{{- end -}}
{{- if $totals -}}
{{- /* lets Volcano refuse a gang that can never fit the queue */ -}}
{{- $spec = append $spec "minResources:" -}}
{{- range $name, $count := $totals -}}
{{- $spec = append $spec (printf "  %s: %s" (toJson $name) (toJson (toString $count))) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $spec = append $spec (printf "scheduleTimeoutSeconds: %d" (int64 $scheduling.timeout)) -}}
{{- end -}}
{{- $manifest := list (printf "apiVersion: %s" (toJson $entry.podGroup.apiVersion)) "kind: \"PodGroup\"" "metadata:" (printf "  name: %s" (toJson $group)) "spec:" -}}
{{- range $spec -}}
{{- $manifest = append $manifest (printf "  %s" .) -}}
{{- end -}}
{{- $_ := set $gang "manifest" $manifest -}}
{{- end -}}
{{- $_ := set $plan "gang" $gang -}}
{{- end -}}
{{- /* plan._container_security */ -}}
{{- $wanted := $v.containerSecurity -}}
{{- $security := dict "allowPrivilegeEscalation" (ternary true false (eq (toString $wanted.allowPrivilegeEscalation) "true")) -}}
{{- $capabilities := dict -}}
{{- if $wanted.dropAllCapabilities -}}
{{- $_ := set $capabilities "drop" (list "ALL") -}}
{{- end -}}
{{- if $wanted.addCapabilities -}}
{{- $_ := set $capabilities "add" $wanted.addCapabilities -}}
{{- end -}}
{{- if $capabilities -}}
{{- $_ := set $security "capabilities" $capabilities -}}
{{- end -}}
{{- with $wanted.seccompProfile -}}
{{- $_ := set $security "seccompProfile" . -}}
{{- end -}}
{{- $_ := set $plan "security" $security -}}
{{- $_ := set $plan "nodes" $planned -}}
{{- $_ := set $plan "shapes" $shapes -}}
{{- $_ := set $plan "volumes" $volumes -}}
{{- $_ := set $plan "labels" $labels -}}
{{- $_ := set $plan "master" (index $planned (printf "%08d" 0)) -}}
{{- $_ := set $plan "backend" $backend -}}
{{- $_ := set $plan "backendReason" $reason -}}
{{- $_ := set $plan "worldSize" $worldSize -}}
{{- $_ := set $plan "catalog" $cat -}}
{{- end -}}

{{/* catalog.accelerator(): one kind's entry with its device kind's facts, as JSON. */}}
{{- define "torchdag.accelerator" -}}
{{- $entry := index .catalog.accelerators .kind -}}
{{- merge (dict) $entry (index .catalog.devices $entry.device) | toJson -}}
{{- end -}}

{{/* catalog.hccl_exec_timeout(): what CANN makes of HCCL_EXEC_TIMEOUT=seconds. */}}
{{- define "torchdag.hcclExecTimeout" -}}
{{- $limits := .catalog.hcclExecTimeout -}}
{{- $step := int64 $limits.step -}}
{{- max $step (mul (div (min (int64 .seconds) (int64 $limits.max)) $step) $step) -}}
{{- end -}}

{{/* plan._resources, as JSON: the node's own resources replace the top-level ones. */}}
{{- define "torchdag.resources" -}}
{{- $chosen := .values.resources | default dict -}}
{{- if hasKey .node "resources" -}}
{{- $chosen = .node.resources | default dict -}}
{{- end -}}
{{- $resources := dict -}}
{{- range $section := list "requests" "limits" -}}
{{- $given := index $chosen $section | default dict -}}
{{- $items := dict -}}
{{- range $key := list "cpu" "memory" -}}
{{- if hasKey $given $key -}}
{{- $_ := set $items $key (include "torchdag.quantity" (index $given $key)) -}}
{{- end -}}
{{- end -}}
{{- if $items -}}
{{- $_ := set $resources $section $items -}}
{{- end -}}
{{- end -}}
{{- $name := index (.values.resourceNames | default dict) .kind | default .entry.resource -}}
{{- if $name -}}
{{- /* extended resources take their request from the limit */ -}}
{{- $limits := $resources.limits | default dict -}}
{{- $_ := set $limits $name (toString .devices) -}}
{{- $_ := set $resources "limits" $limits -}}
{{- end -}}
{{- toJson $resources -}}
{{- end -}}
