{{/*
Helpers. The Workflow must equal what render.py prints (torchdag/plan.py and
templates/workflow.yaml.j2), so each helper names the Python it mirrors.
Helm reads every YAML number as float64: integers are printed through int64.
*/}}

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

{{/*
A Kubernetes quantity as a string, like plan.quantity() (Python's str()): strings verbatim;
whole numbers as integers (4.0 -> "4"; %.0f is exact at any size); below 1e-4 Python
switches to exponent form ("1e-05") as Go's %v does; otherwise fixed notation with the
shortest round-tripping digits, which is how Go's JSON encoder prints it.
*/}}
{{- define "torchdag.quantity" -}}
{{- if kindIs "string" . -}}
{{- . -}}
{{- else -}}
{{- $number := float64 . -}}
{{- if eq $number (floor $number) -}}
{{- if eq $number 0.0 }}0{{ else }}{{ printf "%.0f" $number }}{{ end -}}
{{- else if lt $number 0.0001 -}}
{{- printf "%v" $number -}}
{{- else -}}
{{- toJson $number -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A string -> string map as block YAML lines, keys and values double-quoted. */}}
{{- define "torchdag.stringMap" -}}
{{- range $key, $value := . -}}
{{ quote $key }}: {{ quote $value }}{{ "\n" }}
{{- end -}}
{{- end -}}

{{/* One toleration as a flow mapping; the schema fixes its fields and their types. */}}
{{- define "torchdag.toleration" -}}
{{- $toleration := . -}}
{{- $fields := list -}}
{{- range $key := list "key" "operator" "value" "effect" -}}
{{- if hasKey $toleration $key -}}
{{- $fields = append $fields (printf "%s: %s" $key (quote (index $toleration $key))) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $toleration "tolerationSeconds" -}}
{{- $fields = append $fields (printf "tolerationSeconds: %d" (int64 $toleration.tolerationSeconds)) -}}
{{- end -}}
{{- printf "{%s}" (join ", " $fields) -}}
{{- end -}}

{{/* Index in nodes[] of the master: the node with master: true, else the first. Takes .Values. */}}
{{- define "torchdag.masterIndex" -}}
{{- $masterIndex := 0 -}}
{{- range $index, $node := .nodes -}}
{{- if $node.master -}}
{{- $masterIndex = $index -}}
{{- break -}}
{{- end -}}
{{- end -}}
{{- $masterIndex -}}
{{- end -}}

{{/* plan.resolve_backend; validation has left one accelerator kind under auto. Takes .Values. */}}
{{- define "torchdag.backend" -}}
{{- $backend := .backend | default "auto" -}}
{{- if eq $backend "auto" -}}
{{- $kinds := list -}}
{{- range $node := .nodes -}}
{{- $kinds = append $kinds ($node.accelerator | default "cpu") -}}
{{- end -}}
{{- $kind := first (sortAlpha (uniq $kinds)) -}}
{{- if and (has $kind (list "ascend310p" "ascend310")) (gt (len .nodes) 1) -}}
{{- /* CANN supports HCCL on 310P/310 within one server only */ -}}
{{- $backend = "gloo" -}}
{{- else -}}
{{- $backend = index (dict "ascend910" "hccl" "ascend310p" "hccl" "ascend310" "hccl" "nvidia" "nccl" "cpu" "gloo") $kind -}}
{{- end -}}
{{- end -}}
{{- $backend -}}
{{- end -}}

{{/*
torchdag.plan fills .plan with what torchdag/plan.py's make_plan() computes:
  nodes      in rank order (the master first, then the others as listed), each with
             its DAG task name, container template (shape) and task arguments;
  shapes     one container template per distinct accelerator, devices, resources,
             NIC mode and HCCL_IF_IP, named <accelerator>-x<devices>[-2, -3, ...];
  backend, worldSize, master, anyAscend.
It validates first, so it only ever plans valid values.
Usage: include "torchdag.plan" (dict "root" $ "plan" $plan)
*/}}
{{- define "torchdag.plan" -}}
{{- include "torchdag.validate" .root -}}
{{- $v := .root.Values -}}
{{- $plan := .plan -}}
{{- $nodes := $v.nodes -}}
{{- $ascendKinds := list "ascend310p" "ascend310" "ascend910" -}}
{{- $resourceName := dict "ascend310p" "huawei.com/Ascend310P" "ascend310" "huawei.com/Ascend310" "ascend910" "huawei.com/Ascend910" "nvidia" "nvidia.com/gpu" -}}
{{- $deviceKind := dict "ascend310p" "npu" "ascend310" "npu" "ascend910" "npu" "nvidia" "cuda" "cpu" "cpu" -}}
{{- /* validate.IPV4: RE2 and Python's re read it the same way */ -}}
{{- $ipv4 := `^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$` -}}

{{- $masterIndex := int (include "torchdag.masterIndex" $v) -}}
{{- $order := list $masterIndex -}}
{{- range $index, $_ := $nodes -}}
{{- if ne $index $masterIndex -}}
{{- $order = append $order $index -}}
{{- end -}}
{{- end -}}

{{- $shapes := list -}}
{{- $shapeByKey := dict -}}
{{- $namesTaken := dict -}}
{{- $planned := list -}}
{{- $worldSize := 0 -}}
{{- range $rank, $index := $order -}}
{{- $node := index $nodes $index -}}
{{- $accelerator := $node.accelerator | default "cpu" -}}
{{- $devices := int64 ($node.devices | default 1) -}}
{{- $address := $node.address | default $node.name -}}
{{- $nic := $node.nic | default "" -}}
{{- $nicMode := "named" -}}
{{- if not $nic -}}
{{- $nicMode = "none" -}}
{{- else if eq $nic "auto" -}}
{{- $nicMode = "auto" -}}
{{- end -}}
{{- $ascend := has $accelerator $ascendKinds -}}
{{- $hasIfIp := and $ascend (regexMatch $ipv4 $address) -}}

{{- /* plan._resources: the node's own resources replace the top-level ones */ -}}
{{- $chosen := $v.resources | default dict -}}
{{- if hasKey $node "resources" -}}
{{- $chosen = $node.resources | default dict -}}
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
{{- if hasKey $resourceName $accelerator -}}
{{- /* extended resources take their request from the limit */ -}}
{{- $limits := $resources.limits | default dict -}}
{{- $_ := set $limits (index $resourceName $accelerator) (toString $devices) -}}
{{- $_ := set $resources "limits" $limits -}}
{{- end -}}

{{- $key := printf "%s|%d|%s|%s|%t" $accelerator $devices (toJson $resources) $nicMode $hasIfIp -}}
{{- if not (hasKey $shapeByKey $key) -}}
{{- $base := printf "%s-x%d" $accelerator $devices -}}
{{- $taken := add1 (get $namesTaken $base | default 0) -}}
{{- $_ := set $namesTaken $base $taken -}}
{{- $name := $base -}}
{{- if gt $taken 1 -}}
{{- $name = printf "%s-%d" $base $taken -}}
{{- end -}}
{{- $parameters := list "host" "node-rank" -}}
{{- if eq $nicMode "named" -}}
{{- $parameters = append $parameters "nic" -}}
{{- end -}}
{{- if $hasIfIp -}}
{{- $parameters = append $parameters "if-ip" -}}
{{- end -}}
{{- $shape := dict "name" $name "accelerator" $accelerator "ascend" $ascend "device" (index $deviceKind $accelerator) "devices" $devices "resources" $resources "nicMode" $nicMode "hasIfIp" $hasIfIp "parameters" $parameters -}}
{{- $_ := set $shapeByKey $key $shape -}}
{{- $shapes = append $shapes $shape -}}
{{- end -}}
{{- $shape := index $shapeByKey $key -}}

{{- $argumentValues := dict "host" $node.name "node-rank" (toString $rank) "nic" $nic "if-ip" $address -}}
{{- $arguments := list -}}
{{- range $parameter := $shape.parameters -}}
{{- $arguments = append $arguments (list $parameter (index $argumentValues $parameter)) -}}
{{- end -}}
{{- $planned = append $planned (dict "task" (printf "node-%d" $rank) "name" $node.name "address" $address "shape" $shape "arguments" $arguments "devices" $devices) -}}
{{- $worldSize = add $worldSize $devices -}}
{{- end -}}

{{- $backend := include "torchdag.backend" $v -}}
{{- $anyAscend := false -}}
{{- range $shape := $shapes -}}
{{- if $shape.ascend -}}
{{- $anyAscend = true -}}
{{- end -}}
{{- end -}}
{{- $_ := set $plan "nodes" $planned -}}
{{- $_ := set $plan "shapes" $shapes -}}
{{- $_ := set $plan "master" (first $planned) -}}
{{- $_ := set $plan "backend" $backend -}}
{{- $_ := set $plan "worldSize" $worldSize -}}
{{- $_ := set $plan "anyAscend" $anyAscend -}}
{{- end -}}
