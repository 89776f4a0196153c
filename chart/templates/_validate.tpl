{{/*
The rules values.schema.json cannot state (Helm has checked it first): validate.py's, each under its rule id,
worded by the catalogue's `messages`; one line per problem, all at once. (dict "root" $ "catalog" $catalog)
*/}}
{{- define "torchdag.validate" -}}
{{- $v := .root.Values -}}
{{- $cat := .catalog -}}
{{- $problems := list -}}

{{- /* rules string-*: '{{', NUL and characters YAML cannot carry. Go's JSON shows all of them
       ('{{' and the controls verbatim, NUL as \u0000), so the walk runs only when needed. */ -}}
{{- $json := toJson $v -}}
{{- if or (contains "{{" $json) (contains "\\u0000" $json) (regexMatch "[\\x{7f}-\\x{9f}\\x{fffe}\\x{ffff}]" $json) -}}
{{- $found := dict "problems" (list) -}}
{{- include "torchdag.validate.strings" (dict "path" "" "value" $v "found" $found "catalog" $cat) -}}
{{- $problems = $found.problems -}}
{{- end -}}

{{- /* rules node-*, and the kinds the backend rules read */ -}}
{{- $firstByName := dict -}}
{{- $firstByAddress := dict -}}
{{- $masterIndex := -1 -}}
{{- $distinct := list -}}
{{- $otherDevice := dict -}}
{{- $rules := index $cat.backends ($v.backend | default "auto") -}}
{{- $indexByName := dict }}{{ range $i, $n := $v.nodes }}{{ if not (hasKey $indexByName $n.name) }}{{ $_ := set $indexByName $n.name $i }}{{ end }}{{ end -}}
{{- range $index, $node := $v.nodes -}}
{{- $name := $node.name -}}
{{- $address := $node.address | default $name -}}
{{- /* a node without an address key is reached by its name */ -}}
{{- $addressField := printf "nodes[%d].%s" $index (ternary "address" "name" (hasKey $node "address")) -}}
{{- $other := index $indexByName $address | default -1 -}}
{{- if hasKey $firstByName $name -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "node-duplicate-name" (printf "nodes[%d].name" $index) (dict "name" $name "first"
      (index $firstByName $name)))) -}}
{{- else if hasKey $firstByAddress $address -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "node-duplicate-address" $addressField (dict "address" $address "first" (index
      $firstByAddress $address)))) -}}
{{- else if and (ge (int $other) 0) (ne (int $other) $index) (hasKey $node "address") -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "node-address-other-name" $addressField (dict "address" $address "other" $other))) -}}
{{- end -}}
{{- if not (hasKey $firstByName $name) }}{{ $_ := set $firstByName $name $index }}{{ end -}}
{{- if not (hasKey $firstByAddress $address) }}{{ $_ := set $firstByAddress $address $index }}{{ end -}}
{{- if and $node.master (ge $masterIndex 0) -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "node-two-masters" (printf "nodes[%d].master" $index) (dict "first" $masterIndex))) -}}
{{- else if $node.master }}{{ $masterIndex = $index }}{{ end -}}
{{- $kind := $node.accelerator | default $cat.defaultAccelerator -}}
{{- if not (has $kind $distinct) }}{{ $distinct = append $distinct $kind }}{{ end -}}
{{- if and $rules.devices (not $otherDevice) (not (has (index $cat.kinds $kind).device $rules.devices)) }}{{ $otherDevice = dict "index" $index "kind"
      $kind }}{{ end -}}
{{- end -}}

{{- /* rules backend-devices, backend-mixed-kinds, backend-hccl-card: which nodes the backend spans (catalogue `backends`, `hcclLimits`) */ -}}
{{- $fields := dict "backend" $v.backend "kinds" (join ", " $distinct) "nnodes" (len $v.nodes) -}}
{{- $backendProblem := "" -}}
{{- if $otherDevice -}}
{{- $backendProblem = include "torchdag.fill" (dict "text" (ternary $rules.otherDevice $rules.otherDeviceAll (gt (len $distinct) 1)) "fields" (merge
      $otherDevice $fields)) -}}
{{- else if and $rules.mixedKinds (gt (len $distinct) 1) -}}
{{- $backendProblem = include "torchdag.fill" (dict "text" $rules.mixedKinds "fields" $fields) -}}
{{- else if $rules.cardLimits -}}
{{- $limit := include "torchdag.hcclLimit" (dict "catalog" $cat "kind" (first $distinct) "values" $v) | fromJson -}}
{{- with $limit.refuse }}{{ $backendProblem = include "torchdag.fill" (dict "text" . "fields" (merge (dict "kind" (first $distinct)) $fields)) }}{{ end -}}
{{- end -}}
{{- with $backendProblem }}{{ $problems = append $problems (printf "backend: %s" .) }}{{ end -}}

{{- /* rule restarts-past-deadline: the backoff before every restart (doubled each time) fits in the Workflow's deadline */ -}}
{{- $deadline := int64 ($v.timeouts.workflowDeadline | default 0) }}{{ $waited := int64 0 }}{{ $step := int64 $v.failurePolicy.backoffSeconds }}{{ $fit := 0 -}}
{{- range until (int $v.failurePolicy.maxRestarts) }}{{ if and $deadline (lt $waited $deadline) -}}
{{- $waited = add $waited $step }}{{ $step = mul $step (int64 $cat.restartStrategy.factor) }}{{ if lt $waited $deadline }}{{ $fit = add1 $fit }}{{ end -}}
{{- end }}{{ end -}}
{{- if and $deadline (lt (int $fit) (int $v.failurePolicy.maxRestarts)) }}{{ $problems = append $problems (include "torchdag.problem" (list $cat
      "restarts-past-deadline" "failurePolicy.maxRestarts" (dict "restarts" (int $v.failurePolicy.maxRestarts) "fit" $fit "next" (add1 $fit) "waited" $waited
      "deadline" $deadline "backoff" (int64 $v.failurePolicy.backoffSeconds)))) }}{{ end -}}

{{- /* rules elastic-needs-node-recovery, elastic-min-nodes (validate._elastic_problems) */ -}}
{{- if and $v.elastic.minNodes (or (not $v.failurePolicy.maxRestarts) (ne $v.failurePolicy.recovery "node")) }}{{ $problems = append $problems (include
      "torchdag.problem" (list $cat "elastic-needs-node-recovery" "elastic.minNodes" dict)) }}{{ end -}}
{{- if gt (int $v.elastic.minNodes) (len $v.nodes) }}{{ $problems = append $problems (include "torchdag.problem" (list $cat "elastic-min-nodes"
      "elastic.minNodes" (dict "min" (int $v.elastic.minNodes) "count" (len $v.nodes)))) }}{{ end -}}

{{- /* rules env-too-long, arg-too-long, annotations-too-large: limits in bytes (catalogue `limits`) */ -}}
{{- $limit := int $cat.limits.argBytes -}}
{{- range $key, $value := $v.env -}}
{{- if gt (add (len $key) 1 (len $value)) $limit }}{{ $problems = append $problems (include "torchdag.problem" (list $cat "env-too-long" (printf "env.%s" $key)
      (dict "bytes" (len $value) "limit" $limit))) }}{{ end -}}
{{- end -}}
{{- $words := dict "script" $v.script -}}
{{- range $index, $word := $v.args }}{{ $_ := set $words (printf "args[%d]" $index) $word }}{{ end -}}
{{- range $index, $word := ($v.launcher | default dict).extraArgs }}{{ $_ := set $words (printf "launcher.extraArgs[%d]" $index) $word }}{{ end -}}
{{- range $path, $word := $words -}}
{{- if gt (len $word) $limit }}{{ $problems = append $problems (include "torchdag.problem" (list $cat "arg-too-long" $path (dict "bytes" (len $word) "limit"
      $limit))) }}{{ end -}}
{{- end -}}
{{- $annotationBytes := 0 -}}
{{- range $key, $value := $v.annotations }}{{ $annotationBytes = add $annotationBytes (len $key) (len $value) }}{{ end -}}
{{- if gt $annotationBytes (int $cat.limits.annotationBytes) }}{{ $problems = append $problems (include "torchdag.problem" (list $cat "annotations-too-large"
      "annotations" (dict "bytes" $annotationBytes "limit" (int $cat.limits.annotationBytes)))) }}{{ end -}}

{{- /* rules volume-*: each mount path (in canonical form) is taken once, by torchdag's own volumes first */ -}}
{{- $taken := dict -}}
{{- if $v.shmSize }}{{ $_ := set $taken $cat.shmVolume.mountPath (dict "rule" "volume-on-shm") }}{{ end -}}
{{- range $node := $v.nodes -}}
{{- if and (index $cat.kinds ($node.accelerator | default $cat.defaultAccelerator)).ascend ($v.ascend | default dict).mountDriver -}}
{{- range $cat.ascendMounts }}{{ $_ := set $taken .mountPath (dict "rule" "volume-on-driver" "mount" .name) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $agents := ternary (clean $cat.agents.path) "" (ne (toString ($v.agents | default dict).fromWorkflow) "false") -}}
{{- $names := dict -}}
{{- range $index, $volume := $v.volumes -}}
{{- if hasKey $names $volume.name -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "volume-duplicate-name" (printf "volumes[%d].name" $index) (dict "shown" (include
      "torchdag.validate.show" $volume.name) "first" (index $names $volume.name)))) -}}
{{- else }}{{ $_ := set $names $volume.name $index }}{{ end -}}
{{- $mount := clean $volume.mountPath -}}
{{- $argo := "" }}{{ range $cat.argoMounts }}{{ if and (not $argo) (hasPrefix (printf "%s/" .) (printf "%s/" $mount)) }}{{ $argo = . }}{{ end }}{{ end -}}
{{- if $argo -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "volume-argo-mount" (printf "volumes[%d].mountPath" $index) (dict "shown" (include
      "torchdag.validate.show" $volume.mountPath) "argo" $argo))) -}}
{{- else if and $agents (hasPrefix (printf "%s/" $agents) (printf "%s/" $mount)) -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "volume-on-agents" (printf "volumes[%d].mountPath" $index) (dict "shown" (include
      "torchdag.validate.show" $volume.mountPath) "agents" $agents))) -}}
{{- else }}{{ with index $taken $mount -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat .rule (printf "volumes[%d].mountPath" $index) (merge (dict "shown" (include
      "torchdag.validate.show" $volume.mountPath)) .))) -}}
{{- else }}{{ $_ := set $taken $mount (dict "rule" "volume-duplicate-mount" "first" $index) }}{{ end }}{{ end -}}
{{- end -}}

{{- /* rule resources-request-over-limit: top-level resources and each node's own; quantities as numbers (catalogue `quantity`) */ -}}
{{- $owners := dict "resources" ($v.resources | default dict) -}}
{{- range $index, $node := $v.nodes }}{{ if hasKey $node "resources" }}{{ $_ := set $owners (printf "nodes[%d].resources" $index)
      $node.resources }}{{ end }}{{ end -}}
{{- range $owner, $resources := $owners -}}
{{- range $name, $request := $resources.requests -}}
{{- $limit := index ($resources.limits | default dict) $name -}}
{{- if and (not (kindIs "invalid" $limit)) (gt (include "torchdag.quantityValue" (list $cat $request) | float64) (include "torchdag.quantityValue" (list $cat
      $limit) | float64)) -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "resources-request-over-limit" (printf "%s.requests.%s" $owner $name) (dict "request"
      (include "torchdag.quantity" $request) "limit" (include "torchdag.quantity" $limit)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Chart only, rule release-name-service: on the pod network the release name (the Workflow's name) names the run's
       headless Service and is each node pod's subdomain, a DNS-1035 label. render.py holds `name` to it instead (network-service-name). */ -}}
{{- if include "torchdag.isPod" $v -}}
{{- $release := include "torchdag.fullname" .root -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $release) -}}
{{- $problems = append $problems (include "torchdag.problem" (list $cat "release-name-service" "release name" (dict "shown" (printf "'%s'" $release)))) -}}
{{- end -}}
{{- end -}}

{{- /* rule bytes-below-floor: shmSize and memory below the catalogue's floor (a bare number counts bytes) */ -}}
{{- $bytes := dict }}{{ if not (eq (toString $v.shmSize) "") }}{{ $_ := set $bytes "shmSize" $v.shmSize }}{{ end -}}
{{- range $owner, $resources := $owners }}{{ range $part := list "requests" "limits" -}}
{{- with index ((index $resources $part) | default dict) "memory" }}{{ $_ := set $bytes (printf "%s.%s.memory" $owner $part) . }}{{ end -}}
{{- end }}{{ end -}}
{{- range $path, $amount := $bytes }}{{ $value := include "torchdag.quantityValue" (list $cat $amount) | float64 -}}
{{- if and (gt $value 0.0) (lt $value (float64 $cat.limits.byteFloor)) }}{{ $problems = append $problems (include "torchdag.problem" (list $cat
      "bytes-below-floor" $path (dict "shown" (include "torchdag.quantity" $amount)))) }}{{ end -}}
{{- end -}}

{{- /* rule image-name-too-long: the name as the kubelet normalizes it (docker.io/, library/) is at most limits.imageName */ -}}
{{- $imageName := regexReplaceAll "(:[^/:@]*)?(@[\\s\\S]*)?$" $v.image "" }}{{ $first := (splitn "/" 2 $imageName)._0 }}{{ $hasSlash := contains "/"
      $imageName -}}
{{- $registry := and $hasSlash (or (contains "." $first) (contains ":" $first) (eq $first "localhost") (ne (lower $first) $first)) -}}
{{- $normalized := ternary $imageName (printf "docker.io/%s%s" (ternary "" "library/" $hasSlash) $imageName) $registry -}}
{{- if gt (len $normalized) (int $cat.limits.imageName) }}{{ $problems = append $problems (include "torchdag.problem" (list $cat "image-name-too-long" "image"
      (dict "length" (len $normalized) "limit" (int $cat.limits.imageName) "normalized" (ternary "" " as docker.io/..." $registry)))) }}{{ end -}}

{{- /* Chart only: values.yaml's placeholders for the required keys let `helm lint` render; a real release refuses them. */ -}}
{{- if or .root.Release.IsInstall .root.Release.IsUpgrade -}}
{{- range $key, $placeholder := $cat.chartPlaceholders -}}
{{- if eq (toJson (index $v $key)) (toJson $placeholder) }}{{ $problems = append $problems (include "torchdag.problem" (list $cat "chart-placeholder" $key
      (dict "placeholder" (toJson $placeholder)))) }}{{ end -}}
{{- end -}}
{{- end -}}

{{- if $problems -}}
{{- fail (printf "invalid values (%d problem%s):\n%s" (len $problems) (ternary "" "s" (eq (len $problems) 1)) (join "\n" $problems)) -}}
{{- end -}}
{{- end -}}

{{/* validate.string_problems: every value and key, "path: message" lines collected in .found.problems. */}}
{{- define "torchdag.validate.strings" -}}
{{- $path := .path -}}
{{- $found := .found -}}
{{- $cat := .catalog -}}
{{- if kindIs "string" .value -}}
{{- with include "torchdag.validate.string" (dict "text" .value "isKey" false "path" $path "catalog" $cat) }}{{ $_ := set $found "problems" (append
      $found.problems .) }}{{ end -}}
{{- else if kindIs "map" .value -}}
{{- range $key, $item := .value -}}
{{- $sub := ternary $key (printf "%s.%s" $path $key) (eq $path "") -}}
{{- with include "torchdag.validate.string" (dict "text" $key "isKey" true "path" $sub "catalog" $cat) }}{{ $_ := set $found "problems" (append $found.problems
      .) }}{{ end -}}
{{- include "torchdag.validate.strings" (dict "path" $sub "value" $item "found" $found "catalog" $cat) -}}
{{- end -}}
{{- else if kindIs "slice" .value -}}
{{- range $index, $item := .value -}}
{{- include "torchdag.validate.strings" (dict "path" (printf "%s[%d]" $path $index) "value" $item "found" $found "catalog" $cat) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* validate._string_problem: what is wrong with one string, as "path: message", or nothing. Takes (dict "text" "isKey" "path" "catalog"). */}}
{{- define "torchdag.validate.string" -}}
{{- $fields := dict "subject" (ternary "key " "" .isKey) "shown" (ternary "key" (include "torchdag.validate.show" .text) .isKey) -}}
{{- if contains "{{" .text -}}
{{- include "torchdag.problem" (list .catalog "string-argo-braces" .path $fields) -}}
{{- else if contains "\x00" .text -}}
{{- include "torchdag.problem" (list .catalog "string-nul" .path $fields) -}}
{{- else if regexMatch "[\\x{7f}-\\x{9f}\\x{fffe}\\x{ffff}]" .text -}}
{{- include "torchdag.problem" (list .catalog "string-control" .path $fields) -}}
{{- end -}}
{{- end -}}

{{/* schema_check.show: a value as the message shows it, cut to 80 characters. */}}
{{- define "torchdag.validate.show" -}}
{{- $shown := quote . -}}
{{- if gt (len $shown) 80 }}{{ $shown = printf "%s..." (regexFind "^.{0,77}" $shown) }}{{ end -}}
{{- $shown -}}
{{- end -}}
