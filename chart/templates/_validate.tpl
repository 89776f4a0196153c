{{/*
The rules values.schema.json cannot express, mirrored from torchdag/validate.py with
the same wording: one line per problem, "field.path: message", all reported at once.
Helm has checked the schema before any template runs, so the values here have the
schema's shape; as in validate.py, the cross-field rules run only once no string
holds '{{' or NUL.
*/}}
{{- define "torchdag.validate" -}}
{{- $v := .Values -}}
{{- $problems := list -}}

{{- /* validate.placeholder_problems: '{{' anywhere (Argo has no escape for it, argo#8253) or NUL.
       Go's JSON shows both ('{{' verbatim, NUL as \u0000), so the walk only runs when needed. */ -}}
{{- $json := toJson $v -}}
{{- if or (contains "{{" $json) (contains "\\u0000" $json) -}}
{{- $found := dict "problems" (list) -}}
{{- include "torchdag.validate.strings" (dict "path" "" "value" $v "found" $found) -}}
{{- $problems = $found.problems -}}
{{- end -}}

{{- if not $problems -}}
{{- /* validate.semantic_problems */ -}}
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

{{- $kinds := list -}}
{{- range $node := $v.nodes -}}
{{- $kinds = append $kinds ($node.accelerator | default "cpu") -}}
{{- end -}}
{{- $distinct := uniq $kinds -}}
{{- $backend := $v.backend | default "auto" -}}
{{- if and (eq $backend "auto") (gt (len $distinct) 1) -}}
{{- $problems = append $problems (printf "backend: auto cannot pick one backend for nodes of different accelerator kinds (%s): hccl and nccl cannot span them; set backend: gloo to train across them" (join ", " $distinct)) -}}
{{- else if eq $backend "hccl" -}}
{{- range $index, $kind := $kinds -}}
{{- if not (has $kind (list "ascend310p" "ascend310" "ascend910")) -}}
{{- $problems = append $problems (printf "backend: hccl needs Ascend nodes, but nodes[%d] is %s; use backend: gloo to mix kinds" $index $kind) -}}
{{- break -}}
{{- end -}}
{{- end -}}
{{- else if eq $backend "nccl" -}}
{{- range $index, $kind := $kinds -}}
{{- if ne $kind "nvidia" -}}
{{- $problems = append $problems (printf "backend: nccl needs nvidia nodes, but nodes[%d] is %s; use backend: gloo to mix kinds" $index $kind) -}}
{{- break -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* validate.RESERVED_ENV: variables torchdag sets itself */ -}}
{{- $reserved := list "TORCHDAG_BACKEND" "TORCHDAG_DEVICE" "TORCHDAG_PG_TIMEOUT" "GLOO_SOCKET_IFNAME" "NCCL_SOCKET_IFNAME" "HCCL_SOCKET_IFNAME" "HCCL_IF_IP" "HCCL_CONNECT_TIMEOUT" "HCCL_EXEC_TIMEOUT" "MASTER_ADDR" "MASTER_PORT" "RANK" "LOCAL_RANK" "WORLD_SIZE" "LOCAL_WORLD_SIZE" -}}
{{- range $key, $_ := $v.env -}}
{{- if has $key $reserved -}}
{{- $problems = append $problems (printf "env.%s: is set by torchdag itself (from nodes[], port, timeouts and backend); remove it and use those keys" $key) -}}
{{- end -}}
{{- end -}}

{{- /* validate.BUILTIN_VOLUMES: volume names the rendered pods use already */ -}}
{{- $builtin := list "dshm" "ascend-driver-lib64" "ascend-driver-version" "ascend-dcmi" "ascend-npu-smi" "ascend-install-info" -}}
{{- $seenVolumes := dict -}}
{{- $seenMounts := dict -}}
{{- range $index, $volume := $v.volumes -}}
{{- $name := $volume.name -}}
{{- $mount := regexReplaceAll "/+$" $volume.mountPath "" | default "/" -}}
{{- if has $name $builtin -}}
{{- $problems = append $problems (printf "volumes[%d].name: '%s' is used by torchdag itself; choose another name" $index $name) -}}
{{- else if hasKey $seenVolumes $name -}}
{{- $problems = append $problems (printf "volumes[%d].name: '%s' duplicates volumes[%d].name" $index $name (index $seenVolumes $name)) -}}
{{- end -}}
{{- if not (hasKey $seenVolumes $name) -}}
{{- $_ := set $seenVolumes $name $index -}}
{{- end -}}
{{- if and (eq $mount "/dev/shm") $v.shmSize -}}
{{- $problems = append $problems (printf "volumes[%d].mountPath: /dev/shm is mounted by torchdag (shmSize); set shmSize: \"\" to mount your own" $index) -}}
{{- else if hasKey $seenMounts $mount -}}
{{- $problems = append $problems (printf "volumes[%d].mountPath: '%s' is also the mountPath of volumes[%d]" $index $mount (index $seenMounts $mount)) -}}
{{- end -}}
{{- if not (hasKey $seenMounts $mount) -}}
{{- $_ := set $seenMounts $mount $index -}}
{{- end -}}
{{- end -}}

{{- /* Chart only: the ServiceAccount to create needs a name, and the Workflow must use it. */ -}}
{{- if and ($v.rbac | default dict).createServiceAccount (not $v.serviceAccountName) -}}
{{- $problems = append $problems "serviceAccountName: must be set when rbac.createServiceAccount is true: it names the ServiceAccount to create and the one the pods run as" -}}
{{- end -}}
{{- end -}}

{{- if $problems -}}
{{- fail (printf "invalid values (%d problem%s):\n%s" (len $problems) (ternary "" "s" (eq (len $problems) 1)) (join "\n" $problems)) -}}
{{- end -}}
{{- end -}}

{{/*
Walks every value (keys included) for '{{' and NUL, collecting "path: message" lines
in .found.problems; paths are written as render.py writes them (nodes[2].nic, env.KEY).
*/}}
{{- define "torchdag.validate.strings" -}}
{{- $path := .path -}}
{{- $found := .found -}}
{{- if kindIs "string" .value -}}
{{- if contains "{{" .value -}}
{{- /* validate._show: the value, cut to 80 characters */ -}}
{{- $shown := quote .value -}}
{{- if gt (len $shown) 80 -}}
{{- $shown = printf "%s..." (regexFind "^.{0,77}" $shown) -}}
{{- end -}}
{{- $_ := set $found "problems" (append $found.problems (printf "%s: %s contains '{{', which Argo would read as a placeholder and cannot escape; remove it" $path $shown)) -}}
{{- end -}}
{{- if contains "\x00" .value -}}
{{- $_ := set $found "problems" (append $found.problems (printf "%s: contains a NUL character, which no process argument or environment value can carry" $path)) -}}
{{- end -}}
{{- else if kindIs "map" .value -}}
{{- range $key, $item := .value -}}
{{- $sub := ternary $key (printf "%s.%s" $path $key) (eq $path "") -}}
{{- if contains "{{" $key -}}
{{- $_ := set $found "problems" (append $found.problems (printf "%s: key contains '{{', which Argo would read as a placeholder and cannot escape; remove it" $sub)) -}}
{{- end -}}
{{- include "torchdag.validate.strings" (dict "path" $sub "value" $item "found" $found) -}}
{{- end -}}
{{- else if kindIs "slice" .value -}}
{{- range $index, $item := .value -}}
{{- include "torchdag.validate.strings" (dict "path" (printf "%s[%d]" $path $index) "value" $item "found" $found) -}}
{{- end -}}
{{- end -}}
{{- end -}}
