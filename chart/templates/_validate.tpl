{{/*
The rules values.schema.json cannot express: torchdag/validate.py's semantic_problems and
string_problems for the chart, with the same wording, reading the same catalogue
(_catalog.tpl). One line per problem, "field.path: message", all reported at once.
Helm has checked the schema before any template runs.
Usage: include "torchdag.validate" (dict "root" $ "catalog" $catalog)
*/}}
{{- define "torchdag.validate" -}}
{{- $v := .root.Values -}}
{{- $cat := .catalog -}}
{{- $problems := list -}}
{{- /* A section a user nulled is reported below; the other rules read it as empty. */ -}}
{{- $ascend := $v.ascend | default dict -}}
{{- $launcher := $v.launcher | default dict -}}
{{- $rbac := $v.rbac | default dict -}}

{{- /* validate.string_problems: '{{', NUL and characters YAML cannot carry. Go's JSON shows
       all of them ('{{' and the controls verbatim, NUL as \u0000), so the walk runs only when needed. */ -}}
{{- $json := toJson $v -}}
{{- if or (contains "{{" $json) (contains "\\u0000" $json) (regexMatch "[\\x{7f}-\\x{9f}\\x{fffe}\\x{ffff}]" $json) -}}
{{- $found := dict "problems" (list) -}}
{{- include "torchdag.validate.strings" (dict "path" "" "value" $v "found" $found) -}}
{{- $problems = $found.problems -}}
{{- end -}}

{{- /* validate.null_problems: a user null deleted a default that has no meaningful absence */ -}}
{{- range $refused := $cat.nullRefused -}}
{{- $path := $refused.path -}}
{{- $section := index $v (first $path) -}}
{{- if or (and (eq (len $path) 1) (not (hasKey $v (first $path)))) (and (eq (len $path) 2) (kindIs "map" $section) (not (hasKey ($section | default dict) (last $path)))) -}}
{{- $problems = append $problems (printf "%s: is null, which would delete %s; remove the line to keep the default, or give a value" (join "." $path) $refused.what) -}}
{{- end -}}
{{- end -}}

{{- /* validate._node_problems */ -}}
{{- $firstByName := dict -}}
{{- $firstByAddress := dict -}}
{{- $masterIndex := -1 -}}
{{- range $index, $node := $v.nodes -}}
{{- $name := $node.name -}}
{{- $address := $node.address | default $name -}}
{{- if hasKey $firstByName $name -}}
{{- $problems = append $problems (printf "nodes[%d].name: '%s' duplicates nodes[%d].name; each machine is listed once" $index $name (index $firstByName $name)) -}}
{{- else if hasKey $firstByAddress $address -}}
{{- $problems = append $problems (printf "nodes[%d].address: '%s' is also the address of nodes[%d]; each node needs its own address" $index $address (index $firstByAddress $address)) -}}
{{- end -}}
{{- if not (hasKey $firstByName $name) -}}
{{- $_ := set $firstByName $name $index -}}
{{- end -}}
{{- if not (hasKey $firstByAddress $address) -}}
{{- $_ := set $firstByAddress $address $index -}}
{{- end -}}
{{- if $node.master -}}
{{- if lt $masterIndex 0 -}}
{{- $masterIndex = $index -}}
{{- else -}}
{{- $problems = append $problems (printf "nodes[%d].master: more than one master: nodes[%d] is the master already; at most one node may set master: true" $index $masterIndex) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* validate.backend_problems: which backend can span these nodes, card by card */ -}}
{{- $firstByKind := dict -}}
{{- $distinct := list -}}
{{- $anyAscend := false -}}
{{- $notNccl := -1 -}}
{{- $notAscend := -1 -}}
{{- range $index, $node := $v.nodes -}}
{{- $kind := $node.accelerator | default "cpu" -}}
{{- $device := index $cat.devices (index $cat.accelerators $kind).device -}}
{{- if not (hasKey $firstByKind $kind) -}}
{{- $_ := set $firstByKind $kind $index -}}
{{- $distinct = append $distinct $kind -}}
{{- end -}}
{{- if $device.ascend -}}
{{- $anyAscend = true -}}
{{- else if lt $notAscend 0 -}}
{{- $notAscend = $index -}}
{{- end -}}
{{- if and (ne $device.backend "nccl") (lt $notNccl 0) -}}
{{- $notNccl = $index -}}
{{- end -}}
{{- end -}}
{{- $backend := $v.backend | default "auto" -}}
{{- $backendProblem := "" -}}
{{- if and (eq $backend "auto") (gt (len $distinct) 1) -}}
{{- $backendProblem = printf "auto cannot pick one backend for nodes of different accelerator kinds (%s): hccl and nccl cannot span them; set backend: gloo to train across them" (join ", " $distinct) -}}
{{- else if and (eq $backend "nccl") (ge $notNccl 0) -}}
{{- $backendProblem = printf "nccl needs GPU nodes (device cuda), but nodes[%d] is %s; use backend: gloo to mix kinds" $notNccl ((index $v.nodes $notNccl).accelerator | default "cpu") -}}
{{- else if eq $backend "hccl" -}}
{{- if ge $notAscend 0 -}}
{{- $backendProblem = printf "hccl needs Ascend nodes, but nodes[%d] is %s; use backend: gloo to mix kinds" $notAscend ((index $v.nodes $notAscend).accelerator | default "cpu") -}}
{{- else if gt (len $distinct) 1 -}}
{{- $backendProblem = printf "hccl cannot span different Ascend kinds (%s); use backend: gloo to train across them" (join ", " $distinct) -}}
{{- else -}}
{{- $kind := first $distinct -}}
{{- $support := (index $cat.accelerators $kind).hccl -}}
{{- if eq $support "none" -}}
{{- $backendProblem = printf "hccl: %s has no HCCL collectives (Huawei's HCCL product table); use backend: gloo" $kind -}}
{{- else if and (eq $support "duo-single") (gt (len $v.nodes) 1) -}}
{{- $backendProblem = printf "hccl on %s works within one server only (Atlas 300I Duo), and this job has %d nodes; use backend: gloo across nodes" $kind (len $v.nodes) -}}
{{- else if and (eq $support "duo-single") (not $ascend.duoCard) -}}
{{- $backendProblem = printf "hccl on %s needs Atlas 300I Duo cards; set ascend.duoCard: true if the node has them, else use backend: gloo" $kind -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $backendProblem -}}
{{- $problems = append $problems (printf "backend: %s" $backendProblem) -}}
{{- end -}}

{{- /* validate._env_problems */ -}}
{{- $maxArgBytes := 131071 -}}
{{- range $key, $value := $v.env -}}
{{- if has $key $cat.reservedEnv -}}
{{- $problems = append $problems (printf "env.%s: is set by torchdag itself (from nodes[], port, timeouts and backend); remove it and use those keys" $key) -}}
{{- else if gt (add (len $key) 1 (len $value)) $maxArgBytes -}}
{{- $problems = append $problems (printf "env.%s: is %d bytes; Linux refuses an environment string over %d bytes (MAX_ARG_STRLEN)" $key (len $value) $maxArgBytes) -}}
{{- end -}}
{{- end -}}

{{- /* validate._argument_problems */ -}}
{{- if gt (len $v.script) $maxArgBytes -}}
{{- $problems = append $problems (printf "script: is %d bytes; Linux refuses a single argument over %d bytes (MAX_ARG_STRLEN)" (len $v.script) $maxArgBytes) -}}
{{- end -}}
{{- range $index, $word := $v.args -}}
{{- if gt (len $word) $maxArgBytes -}}
{{- $problems = append $problems (printf "args[%d]: is %d bytes; Linux refuses a single argument over %d bytes (MAX_ARG_STRLEN)" $index (len $word) $maxArgBytes) -}}
{{- end -}}
{{- end -}}
{{- $planned := list "nnodes" "node_rank" "nproc_per_node" "master_addr" "master_port" "rdzv_conf" "max_restarts" "rdzv_backend" "rdzv_endpoint" "rdzv_id" "standalone" -}}
{{- range $index, $word := $launcher.extraArgs -}}
{{- if gt (len $word) $maxArgBytes -}}
{{- $problems = append $problems (printf "launcher.extraArgs[%d]: is %d bytes; Linux refuses a single argument over %d bytes (MAX_ARG_STRLEN)" $index (len $word) $maxArgBytes) -}}
{{- end -}}
{{- $flag := regexReplaceAll "^-+" (first (splitList "=" $word)) "" | replace "-" "_" -}}
{{- if and (hasPrefix "-" $word) (has $flag $planned) -}}
{{- $problems = append $problems (printf "launcher.extraArgs[%d]: '%s' sets a launcher flag torchdag plans itself (from nodes[], port, timeouts, launcher.maxRestarts); remove it and use those keys" $index $word) -}}
{{- end -}}
{{- end -}}

{{- /* validate._metadata_problems */ -}}
{{- range $key, $_ := $v.labels -}}
{{- if hasPrefix "torchdag.io/" $key -}}
{{- $problems = append $problems (printf "labels['%s']: the torchdag.io/ prefix is torchdag's own (job and node-rank labels); choose another key" $key) -}}
{{- end -}}
{{- end -}}
{{- $annotationBytes := 0 -}}
{{- range $key, $value := $v.annotations -}}
{{- $annotationBytes = add $annotationBytes (len $key) (len $value) -}}
{{- end -}}
{{- if gt $annotationBytes 262144 -}}
{{- $problems = append $problems (printf "annotations: hold %d bytes; Kubernetes allows 262144 bytes of annotations per object" $annotationBytes) -}}
{{- end -}}

{{- /* validate._volume_problems */ -}}
{{- $builtin := list $cat.shmVolume.name -}}
{{- $driverMounts := dict -}}
{{- range $cat.ascendMounts -}}
{{- $builtin = append $builtin .name -}}
{{- if and $anyAscend $ascend.mountDriver -}}
{{- $_ := set $driverMounts .mountPath .name -}}
{{- end -}}
{{- end -}}
{{- $seenVolumes := dict -}}
{{- $seenMounts := dict -}}
{{- range $index, $volume := $v.volumes -}}
{{- $name := $volume.name -}}
{{- $mount := clean $volume.mountPath -}}
{{- if has $name $builtin -}}
{{- $problems = append $problems (printf "volumes[%d].name: '%s' is used by torchdag itself; choose another name" $index $name) -}}
{{- else if hasKey $seenVolumes $name -}}
{{- $problems = append $problems (printf "volumes[%d].name: '%s' duplicates volumes[%d].name" $index $name (index $seenVolumes $name)) -}}
{{- end -}}
{{- if not (hasKey $seenVolumes $name) -}}
{{- $_ := set $seenVolumes $name $index -}}
{{- end -}}
{{- if and (eq $mount $cat.shmVolume.mountPath) $v.shmSize -}}
{{- $problems = append $problems (printf "volumes[%d].mountPath: '%s' is /dev/shm, which torchdag mounts (shmSize); set shmSize: \"\" to mount your own" $index $volume.mountPath) -}}
{{- else if hasKey $driverMounts $mount -}}
{{- $problems = append $problems (printf "volumes[%d].mountPath: '%s' is where torchdag mounts the Ascend driver (%s); set ascend.mountDriver: false to mount the driver yourself" $index $volume.mountPath (index $driverMounts $mount)) -}}
{{- else if hasKey $seenMounts $mount -}}
{{- $problems = append $problems (printf "volumes[%d].mountPath: '%s' is also the mountPath of volumes[%d]" $index $volume.mountPath (index $seenMounts $mount)) -}}
{{- end -}}
{{- if not (hasKey $seenMounts $mount) -}}
{{- $_ := set $seenMounts $mount $index -}}
{{- end -}}
{{- end -}}

{{- /* validate._scheduling_problems */ -}}
{{- $scheduling := $v.scheduling | default dict -}}
{{- if and (eq $scheduling.gang "kueue") (not $scheduling.queue) -}}
{{- $problems = append $problems "scheduling.queue: must name the Kueue LocalQueue when gang is kueue (pods without a queue are not managed by Kueue)" -}}
{{- end -}}
{{- if eq (toString $v.automountServiceAccountToken) "false" -}}
{{- if not $v.executorServiceAccountName -}}
{{- $problems = append $problems "executorServiceAccountName: must be set when automountServiceAccountToken is false: Argo's executor still needs a token to report each step" -}}
{{- end -}}
{{- if ne ($scheduling.gang | default "none") "none" -}}
{{- $problems = append $problems "automountServiceAccountToken: must stay true with a gang scheduler: the gang watch reads the pods through the API" -}}
{{- end -}}
{{- end -}}

{{- /* Chart only: values.yaml's placeholders for the required keys let `helm lint` render; a real release refuses them. */ -}}
{{- if or .root.Release.IsInstall .root.Release.IsUpgrade -}}
{{- range $key, $placeholder := $cat.chartPlaceholders -}}
{{- if eq (toJson (index $v $key)) (toJson $placeholder) -}}
{{- $problems = append $problems (printf "%s: is required: values.yaml holds only a placeholder (%s); set it in your values file (helm install NAME chart -f cluster.yaml)" $key (toJson $placeholder)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Chart only: the ServiceAccount to create needs a name, and the Role is never bound to `default` silently. */ -}}
{{- if and $rbac.createServiceAccount (not $v.serviceAccountName) -}}
{{- $problems = append $problems "serviceAccountName: must be set when rbac.createServiceAccount is true: it names the ServiceAccount to create and the one the pods run as" -}}
{{- else if and $rbac.create (not $v.serviceAccountName) -}}
{{- $problems = append $problems "serviceAccountName: must be set when rbac.create is true: binding the executor Role to the namespace's default ServiceAccount would grant it to every pod that runs as default" -}}
{{- end -}}

{{- if $problems -}}
{{- fail (printf "invalid values (%d problem%s):\n%s" (len $problems) (ternary "" "s" (eq (len $problems) 1)) (join "\n" $problems)) -}}
{{- end -}}
{{- end -}}

{{/*
Walks every value (keys included) for what validate._string_problem refuses, collecting
"path: message" lines in .found.problems; paths are written as render.py writes them.
*/}}
{{- define "torchdag.validate.strings" -}}
{{- $path := .path -}}
{{- $found := .found -}}
{{- if kindIs "string" .value -}}
{{- $message := include "torchdag.validate.string" (dict "text" .value "isKey" false) -}}
{{- if $message -}}
{{- $_ := set $found "problems" (append $found.problems (printf "%s: %s" $path $message)) -}}
{{- end -}}
{{- else if kindIs "map" .value -}}
{{- range $key, $item := .value -}}
{{- $sub := ternary $key (printf "%s.%s" $path $key) (eq $path "") -}}
{{- $message := include "torchdag.validate.string" (dict "text" $key "isKey" true) -}}
{{- if $message -}}
{{- $_ := set $found "problems" (append $found.problems (printf "%s: %s" $sub $message)) -}}
{{- end -}}
{{- include "torchdag.validate.strings" (dict "path" $sub "value" $item "found" $found) -}}
{{- end -}}
{{- else if kindIs "slice" .value -}}
{{- range $index, $item := .value -}}
{{- include "torchdag.validate.strings" (dict "path" (printf "%s[%d]" $path $index) "value" $item "found" $found) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* validate._string_problem: what is wrong with one string, or nothing. Takes (dict "text" "isKey"). */}}
{{- define "torchdag.validate.string" -}}
{{- $subject := ternary "key " "" .isKey -}}
{{- if contains "{{" .text -}}
{{- printf "%s contains '{{', which Argo would read as a placeholder and cannot escape; remove it" (ternary "key" (include "torchdag.validate.show" .text) .isKey) -}}
{{- else if contains "\x00" .text -}}
{{- printf "%scontains a NUL character, which no process argument or environment value can carry" $subject -}}
{{- else if regexMatch "[\\x{7f}-\\x{9f}\\x{fffe}\\x{ffff}]" .text -}}
{{- printf "%scontains a control character (DEL, U+0080-U+009F, U+FFFE or U+FFFF), which YAML cannot carry; remove it" $subject -}}
{{- end -}}
{{- end -}}

{{/* validate._show: a value as the message shows it, cut to 80 characters. */}}
{{- define "torchdag.validate.show" -}}
{{- $shown := quote . -}}
{{- if gt (len $shown) 80 -}}
{{- $shown = printf "%s..." (regexFind "^.{0,77}" $shown) -}}
{{- end -}}
{{- $shown -}}
{{- end -}}
