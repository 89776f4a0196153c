{{/*
torchdag.plan: torchdag/plan.py's make_plan(), validating first. It fills .plan with what
_workflow.tpl prints (nodes in rank order, shapes, volumes, master, backend, gang, retry,
security), every string as the Workflow holds it. What goes into a container is catalogue
data (`container`), conditioned on and filled from the facts computed here under plan.py's
names. Usage: include "torchdag.plan" (dict "root" $ "plan" $plan)
*/}}
{{- define "torchdag.plan" -}}
{{- $cat := include "torchdag.catalog" .root | fromYaml -}}
{{- include "torchdag.validate" (dict "root" .root "catalog" $cat) -}}
{{- $v := .root.Values -}}
{{- $plan := .plan -}}
{{- $nodes := $v.nodes -}}
{{- $container := $cat.container -}}
{{- $masterIndex := 0 -}}
{{- range $index, $node := $nodes }}{{ if $node.master }}{{ $masterIndex = $index }}{{ break }}{{ end }}{{ end -}}
{{- $master := index $nodes $masterIndex -}}
{{- $pod := include "torchdag.isPod" $v | eq "true" -}}

{{- /* plan.resolve_backend (rule backend-auto) */ -}}
{{- $backend := $v.backend -}}
{{- $reason := $cat.backendReasons.set -}}
{{- if eq $backend "auto" -}}
{{- $kind := dict "kind" ((index $nodes 0).accelerator | default $cat.defaultAccelerator) -}}
{{- $backend = (index $cat.kinds $kind.kind).backend -}}
{{- $reason = include "torchdag.fill" (dict "text" $cat.backendReasons.auto "fields" $kind) -}}
{{- $limit := include "torchdag.hcclLimit" (dict "catalog" $cat "kind" $kind.kind "values" $v) | fromJson -}}
{{- if and (eq $backend "hccl") $limit.auto }}{{ $backend = "gloo" }}{{ $reason = include "torchdag.fill" (dict "text" $limit.auto "fields" $kind) }}{{ end -}}
{{- end -}}

{{- /* plan.job_facts: what every shape shares */ -}}
{{- $nodeName := include "torchdag.fill" (dict "text" $cat.nodeName "fields" (dict "rank" "%d")) }}{{/* catalog.node_name as a printf format */ -}}
{{- $timeouts := $v.timeouts -}}
{{- $pg := $timeouts.processGroup -}}
{{- $job := dict "backend" $backend "nnodes" (toString (len $nodes)) "masterAddress" (ternary (include "torchdag.fill" (dict "text" $cat.network.masterAddress
      "fields" (dict "master" (printf $nodeName 0) "run" $cat.network.run "clusterDomain" $v.network.clusterDomain))) ($master.address | default $master.name)
      $pod) "port" (printf "%d" (int64 $v.port)) "python" $v.launcher.python -}}
{{- $_ := set $job "preflightTimeout" (printf "%d" (int64 $v.preflight.timeout)) -}}
{{- $_ := set $job "launcherMaxRestarts" (ternary "" (printf "%d" (int64 $v.launcher.maxRestarts)) (kindIs "invalid" $v.launcher.maxRestarts)) -}}
{{- range $fact, $seconds := dict "rendezvous" $timeouts.rendezvous "pgTimeout" $pg "hcclConnect" $timeouts.hcclConnect -}}
{{- $_ := set $job $fact (ternary "" (printf "%d" (int64 $seconds)) (empty $seconds)) -}}
{{- end -}}
{{- $_ := set $job "hcclExecTimeout" (ternary "" (include "torchdag.hcclExecTimeout" (dict "catalog" $cat "seconds" $pg)) (empty $pg)) -}}
{{- $_ := set $job "restarts" (gt (int64 $v.failurePolicy.maxRestarts) 0) -}}
{{- include "torchdag.recoveryFacts" (dict "plan" $plan "job" $job "values" $v "catalog" $cat) }}{{ $nodeRecovery := $plan.nodeRecovery }}{{ $elasticFrom :=
      $plan.elasticFrom -}}
{{- $_ := set $job "whitelistDisable" $v.ascend.whitelistDisable -}}
{{- $_ := merge $job (dict "podNetwork" $pod "rendezvousWait" (printf "%d" (int64 ($timeouts.rendezvous | default $cat.network.rendezvousDefault)))) -}}
{{- $inputs := dict }}{{ range $container.parameters }}{{ $name := . }}{{ if kindIs "map" . }}{{ $name = .value }}{{ end }}{{ $_ := set $inputs $name (include
      "torchdag.fill" (dict "text" $container.inputParameter "fields" (dict "name" $name))) }}{{ $_ := set $job (printf "input:%s" $name) (index $inputs
      $name) }}{{ end -}}

{{- /* the job-wide parts of every container */ -}}
{{- $mountsDriver := false -}}
{{- range $nodes }}{{ if (index $cat.kinds (.accelerator | default $cat.defaultAccelerator)).ascend }}{{ $mountsDriver =
      $v.ascend.mountDriver }}{{ end }}{{ end -}}
{{- $userEnv := list -}}
{{- range $name, $value := $v.env }}{{ $userEnv = append $userEnv (list $name (replace "$" "$$" $value)) }}{{ end -}}
{{- /* torchrun's ${local_rank} macro reads $$ as $ too: the script and its args are escaped twice (on JSON text) */ -}}
{{- $scriptArgs := replace "$" "$$" (toJson (concat (include "torchdag.recorder" (dict "catalog" $cat "values" $v) | fromJsonArray) (prepend ($v.args | default
      list) $v.script))) | fromJsonArray -}}
{{- $agents := include "torchdag.agents" (dict "root" .root "catalog" $cat "values" $v "pod" $pod) | fromJson -}}
{{- $shmMounts := list -}}
{{- if $v.shmSize }}{{ $shmMounts = list (dict "name" $cat.shmVolume.name "mountPath" $cat.shmVolume.mountPath) }}{{ end -}}
{{- $driverMounts := list -}}
{{- range $cat.ascendMounts }}{{ $driverMounts = append $driverMounts (dict "name" .name "mountPath" .mountPath "readOnly" true) }}{{ end -}}
{{- $userMounts := list -}}
{{- range $v.volumes }}{{ $userMounts = append $userMounts (ternary (dict "name" .name "mountPath" .mountPath "readOnly" true) (dict "name" .name "mountPath"
      .mountPath) (eq (toString .readOnly) "true")) }}{{ end -}}

{{- $resourcesByKey := dict -}}
{{- $shapes := list -}}
{{- $shapeByKey := dict -}}
{{- $byBase := dict -}}
{{- /* nodes in rank order, in a dict keyed by the zero-padded rank: appending to a list is quadratic */ -}}
{{- $planned := dict -}}
{{- $worldSize := 0 -}}
{{- $rank := 0 -}}
{{- range $pass := list "master" "others" -}}
{{- range $index, $node := $nodes -}}
{{- if eq (eq $index $masterIndex) (eq $pass "master") -}}
{{- $kind := $node.accelerator | default $cat.defaultAccelerator -}}
{{- $entry := index $cat.kinds $kind -}}
{{- $devices := int64 ($node.devices | default 1) -}}
{{- $address := ternary (printf $nodeName $rank) ($node.address | default $node.name) $pod -}}
{{- $nic := include "torchdag.nodeNic" (dict "node" $node "values" $v "pod" $pod) -}}
{{- $nicMode := ternary "none" (ternary "auto" "named" (eq $nic "auto")) (eq $nic "") -}}
{{- $hasIfIp := and $entry.ifIp (not $pod) (regexMatch $cat.ipv4 $address) -}}
{{- $resourcesKey := printf "%s|%d|%s" $kind $devices (ternary (toJson $node.resources) "-" (hasKey $node "resources")) -}}
{{- if not (hasKey $resourcesByKey $resourcesKey) }}{{ $_ := set $resourcesByKey $resourcesKey (include "torchdag.resources" (dict "node" $node "values" $v
      "entry" $entry "kind" $kind "devices" $devices) | fromJson) }}{{ end -}}
{{- $resources := index $resourcesByKey $resourcesKey -}}
{{- $shared := dict "accelerator" $kind "devices" $devices "resources" (toJson $resources) "nicMode" $nicMode "hasIfIp" $hasIfIp -}}
{{- $_ := set $shared "labels" (toJson ($node.labels | default dict)) -}}
{{- $key := list }}{{ range $container.shapeKey }}{{ $key = append $key (index $shared .) }}{{ end }}{{ $key = toJson $key -}}
{{- if not (hasKey $shapeByKey $key) -}}

{{- /* plan.shape_facts, then plan._shape: the shape's lists from the catalogue */ -}}
{{- $facts := dict "accelerator" $kind "device" $entry.device "devices" (toString $devices) "ascend" $entry.ascend "hasIfIp" $hasIfIp "ifIpDevice" $entry.ifIp
      "ownResources" (hasKey $node "resources") -}}
{{- range $fact, $value := $job }}{{ $_ := set $facts $fact $value }}{{ end -}}
{{- range $mode := list "named" "auto" "none" }}{{ $_ := set $facts (printf "nic%s" (title $mode)) (eq $mode $nicMode) }}{{ end -}}
{{- range $device, $info := $cat.devices }}{{ $_ := set $facts $device (eq $device $entry.device) }}{{ end -}}
{{- $setEnv := and $entry.ascend $v.ascend.setEnvScript -}}
{{- $command := list -}}
{{- if $setEnv }}{{ $command = append (include "torchdag.items" (dict "items" $cat.setEnvCommand "facts" (dict "wrapper" $cat.setEnvWrapper)) | fromJsonArray)
      (replace "$" "$$" $setEnv) }}{{ end -}}
{{- $words := list -}}
{{- if or $v.preflight.enabled (eq $nicMode "auto") $pod }}{{ $words = concat $v.preflight.command (include "torchdag.items" (dict "items"
      $container.preflightArgs "facts" $facts) | fromJsonArray) }}{{ end -}}
{{- $words = concat $words (include "torchdag.items" (dict "items" (index $container.launchers $v.launcher.type) "facts" $facts) | fromJsonArray) -}}
{{- $command = concat $command (replace "$" "$$" (toJson $words) | fromJsonArray) -}}
{{- $args := concat (include "torchdag.items" (dict "items" $container.launcherArgs "facts" $facts) | fromJsonArray) ($v.launcher.extraArgs | default list)
      $scriptArgs -}}
{{- $env := concat (include "torchdag.items" (dict "items" $container.env "facts" $facts) | fromJsonArray) $userEnv -}}
{{- $base := include "torchdag.fill" (dict "text" $container.shapeName "fields" $facts) -}}
{{- $_ := set $byBase $base (add1 (get $byBase $base | default 0)) -}}
{{- $shape := dict "base" $base "suffixes" (include "torchdag.items" (dict "items" $container.shapeSuffixes "facts" $facts) | fromJsonArray) -}}
{{- $_ := set $shape "parameters" (include "torchdag.items" (dict "items" $container.parameters "facts" $facts) | fromJsonArray) -}}
{{- $_ := set $shape "mounts" (concat $shmMounts (ternary $driverMounts list (and $entry.ascend $mountsDriver)) $userMounts (ternary (list $agents.mount) list
      (not (empty $agents)))) -}}
{{- range $field, $value := dict "accelerator" $kind "device" $entry.device "devices" $devices "command" $command "args" (replace "$" "$$" (toJson $args) |
      fromJsonArray) "env" $env "fieldEnv" (include "torchdag.items" (dict "items" $container.fieldEnv "facts" $facts) | fromJsonArray) "resources" $resources
      "setEnv" $setEnv "podSecurity" (include "torchdag.ascendPodSecurity" (dict "values" $v "ascend" $entry.ascend) | fromJsonArray) "labels" ($node.labels |
      default dict) "ifIp" $hasIfIp }}{{ $_ := set $shape $field $value }}{{ end -}}
{{- $_ := set $shapeByKey $key $shape -}}
{{- $shapes = append $shapes $shape -}}
{{- end -}}
{{- $shape := index $shapeByKey $key -}}

{{- $given := dict "host" $node.name "node-rank" (toString $rank) "nic" $nic "if-ip" $address "restart" $container.argoArguments.restart -}}
{{- $arguments := list -}}
{{- range $shape.parameters }}{{ if hasKey $given . }}{{ $arguments = append $arguments (list . (index $given .)) }}{{ end }}{{ end -}}
{{- $_ := set $planned (printf "%08d" $rank) (dict "task" (printf $nodeName $rank) "rank" $rank "index" $index "name" $node.name "address" $address "nic"
      $nic "accelerator" $kind "devices" $devices "shape" $shape "arguments" $arguments) -}}
{{- $worldSize = add $worldSize $devices -}}
{{- $rank = add1 $rank -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* plan._shape_names */ -}}
{{- $taken := dict -}}
{{- range $shape := $shapes -}}
{{- $name := ternary (join "-" (prepend $shape.suffixes $shape.base)) $shape.base (gt (int (get $byBase $shape.base)) 1) -}}
{{- $_ := set $taken $name (add1 (get $taken $name | default 0)) -}}
{{- $_ := set $shape "name" (ternary (printf "%s-%d" $name (int (get $taken $name))) $name (gt (int (get $taken $name)) 1)) -}}
{{- $_ := set $shape "retryWrapper" (include "torchdag.fill" (dict "text" $container.retryWrapper "fields" $shape)) -}}
{{- end -}}

{{- /* plan.volumes */ -}}
{{- $volumes := list -}}
{{- if $v.shmSize }}{{ $volumes = append $volumes (dict "name" $cat.shmVolume.name "emptyDir" (dict "medium" $cat.shmVolume.medium "sizeLimit" (include
      "torchdag.quantity" $v.shmSize))) }}{{ end -}}
{{- if $mountsDriver -}}
{{- $driver := dict "driver" (regexReplaceAll "/+$" $v.ascend.driverPath "") -}}
{{- range $cat.ascendMounts }}{{ $volumes = append $volumes (dict "name" .name "hostPath" (dict "path" (include "torchdag.fill" (dict "text" .hostPath "fields"
      $driver)) "type" .type)) }}{{ end -}}
{{- end -}}
{{- range $v.volumes -}}
{{- if .hostPath -}}
{{- $volumes = append $volumes (dict "name" .name "hostPath" (ternary (pick .hostPath "path" "type") (pick .hostPath "path") (not (empty .hostPath.type)))) -}}
{{- else -}}
{{- $volumes = append $volumes (dict "name" .name "persistentVolumeClaim" (ternary (dict "claimName" .persistentVolumeClaim.claimName "readOnly" true) (dict
      "claimName" .persistentVolumeClaim.claimName) (eq (toString .readOnly) "true"))) -}}
{{- end -}}
{{- end -}}

{{- with $agents }}{{ $volumes = append $volumes .volume }}{{ end -}}
{{- /* restarts as numbers (plan_model.retry_policy), then as Argo's strings (recovery.argo_retry) */ -}}
{{- with include "torchdag.retryPolicy" (dict "values" $v "catalog" $cat) | fromJson }}{{ $_ := set $plan "retryPolicy" . }}{{ $_ := set $plan (ternary
      "nodeRetry" "retry" $nodeRecovery) (include "torchdag.argoRetry" . | fromJson) }}{{ end -}}
{{- include "torchdag.gang" (dict "plan" $plan "values" $v "catalog" $cat "nodes" $planned) -}}
{{- include "torchdag.watch" (dict "plan" $plan "values" $v "nodes" $planned "catalog" $cat) -}}
{{- /* Plan.scheduler_name: scheduling.schedulerName with or without a gang (a gang's default otherwise) */ -}}
{{- $_ := set $plan "schedulerName" (ternary ($plan.gang | default dict).schedulerName $v.scheduling.schedulerName (not (empty $plan.gang))) -}}

{{- include "torchdag.networkPlan" (dict "plan" $plan "values" $v "catalog" $cat "inputs" $inputs "pod" $pod) -}}
{{- $_ := set $plan "depends" (join " && " (compact (list (include "torchdag.nodeDepends" $plan) (ternary $cat.agents.task "" (not (empty $agents)))))) -}}

{{- /* plan.node_loops: past argoFullCrdMaxItems DAG tasks, each shape's machines in withItems tasks of at most maxItems */ -}}
{{- $gangTasks := 1 }}{{ with $plan.gang }}{{ $gangTasks = ternary 2 1 (not (empty .manifest)) }}{{ end -}}
{{- if gt (add (len $nodes) $gangTasks (ternary 1 0 $pod) (ternary 1 0 (not (empty $agents)))) (int $cat.argoFullCrdMaxItems) -}}
{{- $loops := list -}}
{{- range $shape := $shapes -}}
{{- $first := dict }}{{ $varying := dict -}}
{{- range $_, $node := $planned }}{{ if eq $node.shape.name $shape.name }}{{ range $pair := $node.arguments -}}
{{- $name := index $pair 0 }}{{ if not (hasKey $first $name) }}{{ $_ := set $first $name (index $pair 1) }}{{ end -}}
{{- with index $cat.nodeLoops.keys $name }}{{ if or (has $name $cat.nodeLoops.naming) (ne (index $first $name) (index $pair 1)) }}{{ $_ := set $varying .
      $name }}{{ end }}{{ end -}}
{{- end }}{{ end }}{{ end -}}
{{- $arguments := list -}}
{{- range $shape.parameters }}{{ $key := index $cat.nodeLoops.keys . | default "" }}{{ if hasKey $first . }}{{ $arguments = append $arguments (list . (ternary
      (printf "{{item.%s}}" $key) (index $first .) (hasKey $varying $key))) }}{{ end }}{{ end -}}
{{- $items := list }}{{ $chunkElastic := false -}}
{{- range $_, $node := $planned }}{{ if eq $node.shape.name $shape.name -}}
{{- if and $items (ne $chunkElastic (ge (int $node.rank) (int $elasticFrom))) }}{{ $loops = append $loops (dict "task" (include "torchdag.fill" (dict "text"
      $cat.nodeLoops.task "fields" (dict "index" (len $loops)))) "shape" $shape "arguments" $arguments "items" $items "elastic" $chunkElastic) }}{{ $items =
      list }}{{ end -}}
{{- if not $items }}{{ $chunkElastic = ge (int $node.rank) (int $elasticFrom) }}{{ end -}}
{{- $given := dict }}{{ range $node.arguments }}{{ $_ := set $given (index . 0) (index . 1) }}{{ end -}}
{{- $pairs := list }}{{ range $key, $name := $varying }}{{ $pairs = append $pairs (printf "%s: %s" (toJson $key) (toJson (index $given $name))) }}{{ end -}}
{{- $items = append $items (printf "{%s}" (join ", " $pairs)) -}}
{{- if eq (len $items) (int $cat.nodeLoops.maxItems) -}}
{{- $loops = append $loops (dict "task" (include "torchdag.fill" (dict "text" $cat.nodeLoops.task "fields" (dict "index" (len $loops)))) "shape" $shape
      "arguments" $arguments "items" $items "elastic" $chunkElastic) }}{{ $items = list -}}
{{- end -}}
{{- end }}{{ end -}}
{{- with $items }}{{ $loops = append $loops (dict "task" (include "torchdag.fill" (dict "text" $cat.nodeLoops.task "fields" (dict "index" (len $loops))))
      "shape" $shape "arguments" $arguments "items" . "elastic" $chunkElastic) }}{{ end -}}
{{- end -}}
{{- $_ := set $plan "loops" $loops }}{{ end -}}

{{- /* plan.container_security */ -}}
{{- $wanted := $v.containerSecurity -}}
{{- $security := dict "allowPrivilegeEscalation" (eq (toString $wanted.allowPrivilegeEscalation) "true") -}}
{{- $capabilities := dict -}}
{{- if $wanted.dropAllCapabilities }}{{ $_ := set $capabilities "drop" (list "ALL") }}{{ end -}}
{{- with $wanted.addCapabilities }}{{ $_ := set $capabilities "add" . }}{{ end -}}
{{- with $capabilities }}{{ $_ := set $security "capabilities" . }}{{ end -}}
{{- with $wanted.seccompProfile }}{{ $_ := set $security "seccompProfile" . }}{{ end -}}

{{- $labels := dict $cat.labels.job $v.name -}}
{{- range $key, $value := $v.labels }}{{ $_ := set $labels $key $value }}{{ end -}}
{{- range $field, $value := dict "agents" $agents "security" $security "nodes" $planned "shapes" $shapes "volumes" $volumes "labels" $labels
      "worldSize" $worldSize "master" (index $planned (printf "%08d" 0)) "masterAddress" $job.masterAddress "inputs" $inputs
      "backend" $backend "backendReason" $reason "catalog" $cat -}}
{{- $_ := set $plan $field $value -}}
{{- end -}}
{{- end -}}


{{/* catalog.hccl_exec_timeout(): what CANN makes of HCCL_EXEC_TIMEOUT=seconds. */}}
{{- define "torchdag.hcclExecTimeout" -}}
{{- $step := int64 .catalog.hcclExecTimeout.step -}}
{{- max $step (mul (div (min (int64 .seconds) (int64 .catalog.hcclExecTimeout.max)) $step) $step) -}}
{{- end -}}

{{/* catalog.hccl_limit(): the first of a card's HCCL limits that holds for this job, as JSON ({} if none). Takes (dict "catalog" "kind" "values"). */}}
{{- define "torchdag.hcclLimit" -}}
{{- $holds := dict "always" true "multiNode" (gt (len .values.nodes) 1) "noDuoCard" (not (.values.ascend | default dict).duoCard) -}}
{{- $found := dict -}}
{{- range index .catalog.hcclLimits (index .catalog.kinds .kind).hccl }}{{ if and (not $found) (index $holds .when) }}{{ $found = . }}{{ end }}{{ end -}}
{{- toJson $found -}}
{{- end -}}

{{/* plan._resources, as JSON: the node's own resources replace the top-level ones. */}}
{{- define "torchdag.resources" -}}
{{- $chosen := ternary .node.resources .values.resources (hasKey .node "resources") | default dict -}}
{{- $resources := dict -}}
{{- range $section := list "requests" "limits" -}}
{{- $given := index $chosen $section | default dict -}}
{{- $quantities := dict -}}
{{- range $key := list "cpu" "memory" }}{{ if hasKey $given $key }}{{ $_ := set $quantities $key (include "torchdag.quantity" (index $given
      $key)) }}{{ end }}{{ end -}}
{{- with $quantities }}{{ $_ := set $resources $section . }}{{ end -}}
{{- end -}}
{{- /* extended resources take their request from the limit */ -}}
{{- with index (.values.resourceNames | default dict) .kind | default .entry.resource -}}
{{- $limits := $resources.limits | default dict -}}
{{- $_ := set $limits . (toString $.devices) -}}
{{- $_ := set $resources "limits" $limits -}}
{{- end -}}
{{- toJson $resources -}}
{{- end -}}
