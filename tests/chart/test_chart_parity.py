"""Parity of the Helm chart with render.py: from the same values file, `helm template`
and render.py produce the same Workflow spec, and reject the same bad input."""

from __future__ import annotations

import ipaddress
import re
import tempfile
from pathlib import Path

import network_strategy
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plain_yaml import MixedDumper

from bad_cases import BAD_CASES, FIT_CASES, fit_values
from chart_helpers import REPO, VALUES_FILES, assert_same_workflow, helm_spellings, helm_template
from sync_chart import builtin_volumes, reserved_env
from torchdag.catalog import accelerator, accelerator_kinds, catalog, hccl_limit
from torchdag.validate import quantity_value
from torchdag.values import load_schema

_QuotedDumper = MixedDumper  # the name other test modules import (tests/e2e/test_api_server_accepts.py)


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_spec_equals_render_py(helm, values):
    assert_same_workflow(helm, values)


# --- Property: random valid values files ------------------------------------------------

# Characters validation refuses (YAML cannot carry them); '{{' likewise.
REFUSED = re.compile("[\x00\x7f-\x9f\ufffe\uffff]")
# Strings that break naive templating: quotes, YAML indicators, comments, newlines,
# unicode (incl. NEL, line/paragraph separators, BOM), shell and $(VAR) syntax, backticks.
HOSTILE_PIECES = ["'", '"', ": ", " #", "#", "\n", "\r\n", "\t", "\\", "$(HOME)", "$$(X)", "$", "${A}", ";", "`id`",
                  "- ", "{a: b}", "[x]", "&a", "*a", "!tag", "%", "@", "|", ">", "?", "ü", "训练", "\u2028",
                  "\ufeff", "\u00a0", "<&>", "😀", "null", "~", "yes", "0x1F", "1e3", "=", "}}", "{", "}"]
hostile_text = st.lists(
    st.one_of(st.sampled_from(HOSTILE_PIECES),
              st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6)), max_size=6,
).map("".join).filter(lambda s: "{{" not in s and not REFUSED.search(s))  # what both refuse (tests/bad_cases.py)
hostile_nonempty = hostile_text.filter(bool)
not_flag = hostile_nonempty.filter(lambda s: not s.startswith("--"))  # launcher.extraArgs: no planned flag
INTERPRETER = re.compile(next(rule["not"]["pattern"] for rule in load_schema()["properties"]["script"]["allOf"]
                              if rule["x-rule"] == "script-interpreter"))  # a program before the script's path
one_word = hostile_nonempty.map(lambda s: re.sub(r"[\t\n\v\f\r ]", "", s)).filter(bool)  # launcher.python
command = st.tuples(one_word, st.lists(hostile_nonempty, max_size=2)).map(lambda c: [c[0], *c[1]])  # a program first
dns_label = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
env_name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(
    lambda n: n not in reserved_env() and not n.startswith("PET_"))
quantity = st.one_of(
    st.integers(0, 10**6),
    st.floats(0, 1e9, allow_nan=False, allow_infinity=False),
    st.sampled_from(["500m", "16Gi", "4", "0.5", "1.5Gi", "1e3", "2E6", "+1", ".5", "7.", "100Ki", "3k"]),
)
byte_quantity = st.one_of(  # 0 (none) or at least 1Mi (rule bytes-below-floor: a bare 64 is 64 bytes)
    st.just(0), st.integers(2**20, 10**12), st.floats(2**20, 1e12, allow_nan=False, allow_infinity=False),
    st.sampled_from(["16Gi", "1.5Gi", "2E6", "1e9", "100Mi", "3M", "1048576", "1024Ki"]))
cpu_memory = st.fixed_dictionaries({}, optional={"cpu": quantity, "memory": byte_quantity})
resources = st.fixed_dictionaries({}, optional={"requests": cpu_memory, "limits": cpu_memory})
# The kinds come from the catalogue: a new kind is drawn without touching this file.
ACCELERATORS = accelerator_kinds()
# Kinds whose nodes one backend can span whatever their number (catalogue `backends` and `hcclLimits`).
SPANNING = {backend: [kind for kind in ACCELERATORS if accelerator(kind)["device"] in rules.get("devices", [])
                      and not (rules.get("cardLimits") and hccl_limit(kind, 2, True))]
            for backend, rules in catalog()["backends"].items() if rules.get("devices")}
# Kinds a backend spans on one node only, with the Duo card (values_strategy sets ascend.duoCard).
ONE_NODE = {backend: [kind for kind in ACCELERATORS if accelerator(kind)["device"] in rules.get("devices", [])
                      and kind not in SPANNING[backend] and not hccl_limit(kind, 1, True)]
            for backend, rules in catalog()["backends"].items() if rules.get("devices")}


# Sections (objects whose keys have defaults). Both renderers refuse a null section (see
# test_null_without_meaning_is_refused_by_both), so the strategy never draws one.
SECTIONS = ("launcher", "timeouts", "workflow", "ascend", "preflight", "rbac", "scheduling", "failurePolicy",
            "containerSecurity", "network", "elastic")
# Keys whose absence means "off" (schema x-null): a null deletes the default (not failurePolicy's maxRestarts).
RECOVERY = ["node", "job"]  # failurePolicy.recovery
NULLABLE = {"rendezvous", "processGroup", "hcclConnect", "workflowDeadline", "ttlSecondsAfterFinished", "maxRestarts"}


def maybe_null(strategy, key):
    """A value, or (rarely, where the schema allows it) null, which deletes the default as in Helm."""
    return st.one_of(strategy, strategy, strategy, st.none()) if key in NULLABLE else strategy


def section(**keys):
    return st.fixed_dictionaries({}, optional={key: maybe_null(value, key) for key, value in keys.items()})


@st.composite
def nodes_strategy(draw, backend: str) -> list[dict]:
    count = draw(st.integers(1, 16))
    if backend == "gloo":
        kinds = draw(st.lists(st.sampled_from(ACCELERATORS), min_size=count, max_size=count))
    elif backend in SPANNING:  # e.g. HCCL spans servers on the training series only (catalogue `hccl`)
        kinds = [draw(st.sampled_from(SPANNING[backend]))] * count
        if ONE_NODE[backend] and draw(st.integers(0, 3)) == 0:
            kinds = [draw(st.sampled_from(ONE_NODE[backend]))]
    else:  # auto: one kind only
        kinds = [draw(st.sampled_from(ACCELERATORS))] * count
    master = draw(st.one_of(st.none(), st.integers(0, count - 1)))
    nodes = []
    for index, kind in enumerate(kinds):
        # Names and addresses are unique by construction: IPv4 names come from 192.168/16,
        # explicit IPv4 addresses from 10/8, DNS addresses carry the index.
        name_style = draw(st.sampled_from(["dns", "ipv4", "fqdn"]))
        name = {"dns": f"node-{index}", "ipv4": f"192.168.{index // 200}.{index % 200 + 1}",
                "fqdn": f"gpu-{index}.cluster.local"}[name_style]
        node: dict = {"name": name}
        address_style = draw(st.sampled_from(["none", "ipv4", "dns"]))
        if address_style == "ipv4":
            node["address"] = str(ipaddress.IPv4Address("10.0.0.1") + index)
        elif address_style == "dns":
            node["address"] = f"host-{index}.example.net"
        nic = draw(st.sampled_from([None, "auto", "eth0", "ens1f0np0", "enp11s0f0", "bond0.100"]))
        if nic:
            node["nic"] = nic
        if kind != "cpu" or draw(st.booleans()):
            node["accelerator"] = kind
        devices = draw(st.one_of(st.none(), st.integers(1, 8), st.just(128)))
        if devices is not None:
            node["devices"] = devices
        if master == index:
            node["master"] = True
        elif draw(st.integers(0, 9)) == 0:
            node["master"] = False
        if draw(st.integers(0, 3)) == 0:
            node["resources"] = draw(resources)
        if draw(st.integers(0, 3)) == 0:  # a few shared maps, so that labeled nodes also share a template
            node["labels"] = draw(st.one_of(st.sampled_from([{"team": "vision"}, {"rack": "r1", "team": "vision"}]),
                                            label_map))
        nodes.append(node)
    return nodes


# Kubernetes key and label-value syntax (the schema enforces it; values stay free text in annotations)
qualified_name = st.from_regex(r"([a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]{1,4})*/)?"
                               r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?", fullmatch=True).filter(
    lambda key: not re.fullmatch(r"true|false|[0-9]+(\.[0-9]+)?(e[-+][0-9]+)?", key))  # refused (rule key-yaml-word)
extended_name = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]{1,4})*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}"
                              r"[A-Za-z0-9])?", fullmatch=True).filter(lambda n: "kubernetes.io/" not in n
                                                                      and not n.startswith("requests."))
label_value = st.from_regex(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,10})?[A-Za-z0-9])?", fullmatch=True)
label_map = st.dictionaries(qualified_name, label_value, max_size=3)
annotation_map = st.dictionaries(qualified_name, hostile_text, max_size=3)

toleration = st.fixed_dictionaries({}, optional={
    "key": qualified_name, "operator": st.sampled_from(["Exists", "Equal"]), "value": label_value,
    "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    "tolerationSeconds": st.integers(-10, 10**7),
})
security_context = st.fixed_dictionaries({}, optional={
    "runAsUser": st.integers(0, 2**31 - 1), "runAsGroup": st.integers(0, 2**31 - 1), "runAsNonRoot": st.booleans(),
    "fsGroup": st.integers(0, 2**31 - 1), "supplementalGroups": st.lists(st.integers(0, 2**31 - 1), max_size=3),
})


@st.composite
def volumes_strategy(draw) -> list[dict]:
    names = draw(st.lists(dns_label.filter(lambda n: n not in builtin_volumes()), unique=True, max_size=3))
    volumes = []
    for index, name in enumerate(names):
        # The index keeps mount paths distinct after trailing '/' are stripped.
        volume: dict = {"name": name, "mountPath": f"/mnt/v{index}" + draw(st.sampled_from(["", "/", "/a b", "/ü:#"]))}
        if draw(st.booleans()):
            volume["hostPath"] = {"path": "/" + draw(hostile_text)}
            kind = draw(st.sampled_from([None, "", "Directory", "DirectoryOrCreate", "File"]))
            if kind is not None:
                volume["hostPath"]["type"] = kind
        else:
            volume["persistentVolumeClaim"] = {"claimName": draw(dns_label)}
        read_only = draw(st.sampled_from([None, True, False]))
        if read_only is not None:
            volume["readOnly"] = read_only
        volumes.append(volume)
    return volumes


@st.composite
def values_strategy(draw) -> dict:
    backend = draw(st.sampled_from([None, "auto", "gloo", "gloo", "hccl", "nccl"]))
    values: dict = {
        "name": draw(dns_label),
        "image": draw(st.sampled_from(["registry.example.com/train:1.0", "192.168.110.125:8443/agent/ppo_torch:3.1",
                                       "img@sha256:" + "a" * 64])),
        # not a launcher option, nor a program before the path (rules script-dash, script-interpreter)
        "script": draw(hostile_nonempty.filter(lambda s: not s.startswith("-") and not INTERPRETER.match(s))),
        "nodes": draw(nodes_strategy(backend or "auto")),
    }
    if backend is not None:
        values["backend"] = backend
    service_account = draw(st.one_of(st.none(), st.just(""), dns_label))
    optional = {
        "kind": st.sampled_from(["Workflow", "WorkflowTemplate"]),
        "namespace": st.sampled_from(["", "ml", "team-a"]),
        "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never"]),
        "imagePullSecrets": st.lists(dns_label, max_size=2),
        "args": st.lists(hostile_text, max_size=6),
        "workingDir": st.one_of(st.just(""), hostile_text.map("/".__add__)),  # absolute or empty
        "port": st.integers(1, 65535),
        "env": st.dictionaries(env_name, hostile_text, max_size=5),
        "resources": resources,
        "nodeSelector": label_map,
        "tolerations": st.lists(toleration, max_size=3),
        "labels": label_map,
        "annotations": annotation_map,
        "hostNetwork": st.booleans(),
        "network": network_strategy.network(section),
        "podSecurity": network_strategy.POD_SECURITY,
        "shmSize": st.one_of(byte_quantity, st.just("")),
        "securityContext": security_context,
        "volumes": volumes_strategy(),
        "launcher": section(type=st.sampled_from(["torchrun", "launch"]), python=one_word, recordErrors=st.booleans(),
                            maxRestarts=st.integers(0, 10), extraArgs=st.lists(st.just("-m") | not_flag, max_size=3)),
        "timeouts": section(rendezvous=st.integers(1, 10**6), processGroup=st.integers(1, 10**6),
                            hcclConnect=st.integers(120, 7200), workflowDeadline=st.integers(1, 10**8)),
        "workflow": section(ttlSecondsAfterFinished=st.integers(0, 10**7),
                            podGC=st.sampled_from(["", "OnPodCompletion", "OnPodSuccess", "OnWorkflowCompletion",
                                                   "OnWorkflowSuccess"]),
                            priorityClassName=st.one_of(st.just(""), dns_label), nodeStatusOffload=st.booleans()),
        "ascend": section(mountDriver=st.booleans(),
                          driverPath=st.sampled_from(["/", "/opt/ascend/driver", "/usr/local/Ascend/driver//", "/d ü"]),
                          setEnvScript=hostile_text, whitelistDisable=st.booleans(), duoCard=st.booleans(),
                          deviceGroup=st.one_of(st.none(), st.integers(0, 2**31 - 1))),
        "preflight": section(enabled=st.booleans(), command=command, timeout=st.integers(1, 10**4)),
        "agents": section(fromWorkflow=st.booleans()),
        "scheduling": section(gang=st.sampled_from(["none", "volcano", "kueue", "coscheduling"]),
                              queue=st.one_of(st.just(""), dns_label),
                              schedulerName=st.one_of(st.just(""), dns_label), timeout=st.integers(1, 86400),
                              watchCommand=command),
        "containerSecurity": section(allowPrivilegeEscalation=st.booleans(), dropAllCapabilities=st.booleans(),
                                     addCapabilities=st.lists(st.sampled_from(["IPC_LOCK", "SYS_PTRACE", "NET_ADMIN"]),
                                                              max_size=2),
                                     seccompProfile=st.sampled_from(["RuntimeDefault", "Unconfined", ""])),
        "failurePolicy": st.fixed_dictionaries({}, optional=dict(
            maxRestarts=st.integers(0, 100), backoffSeconds=st.integers(1, 86400), recovery=st.sampled_from(RECOVERY))),
        "elastic": section(minNodes=st.integers(0, 3), rejoinSeconds=st.integers(1, 600)),
        "resourceNames": st.dictionaries(st.sampled_from([k for k in ACCELERATORS if accelerator(k)["resource"]]),
                                         extended_name, max_size=2),
        "automountServiceAccountToken": st.booleans(),
        "executorServiceAccountName": st.one_of(st.just(""), dns_label, st.just("argo.executor-1")),
        # Chart-only keys: render.py ignores them, and they must not change the Workflow.
        "rbac": section(create=st.just(bool(service_account)), legacyExecutor=st.booleans(),
                        createServiceAccount=st.just(bool(service_account))),
    }
    if service_account is not None:
        values["serviceAccountName"] = service_account
    for key, strategy in optional.items():
        choice = draw(st.integers(0, 9))
        if choice < 5:
            continue  # absent: the default applies
        if choice == 9 and key in ("args", "env", "labels", "annotations", "volumes", "tolerations", "workingDir"):
            values[key] = None  # deletes an empty default: the same as leaving it out
        else:
            values[key] = draw(strategy)
    # /dev/shm stays torchdag's while shmSize is set; volumes_strategy never mounts it.
    if values["nodes"][0].get("accelerator") in ONE_NODE.get(values.get("backend"), []):
        values["ascend"] = {**(values.get("ascend") or {}), "duoCard": True}  # hccl on one 310P server needs it
    scheduling = values.get("scheduling")
    if values.get("automountServiceAccountToken") is False:
        # No token: Argo's executor needs an account of its own, and no gang watch can read the API.
        if not values.get("executorServiceAccountName"):
            values["executorServiceAccountName"] = draw(dns_label)
        if isinstance(scheduling, dict):
            scheduling["gang"] = "none"
    if isinstance(scheduling, dict) and scheduling.get("gang") == "kueue" and len(values["nodes"]) > 8:
        scheduling["gang"] = "volcano"  # up to one Kueue podSet a node template, 8 at most (tests/bad_cases.py)
    if isinstance(scheduling, dict) and scheduling.get("gang") == "kueue" and not scheduling.get("queue"):
        scheduling["queue"] = "team-a"  # Kueue needs its LocalQueue (refusal tested in test_gang.py)
    if isinstance(scheduling, dict) and scheduling.get("gang", "none") in ("none", "coscheduling"):
        scheduling.pop("queue", None)  # nothing would read it (refusal tested in test_scheduling_keys.py)
    kubernetes_valid(values)
    network_strategy.fit(values)
    return fit_values(values)  # ports, timeouts and restarts that can work (refusals: FIT_CASES in tests/bad_cases.py)


def kubernetes_valid(values: dict) -> None:
    """What Kubernetes refuses, and so both renderers (tests/bad_cases.py), made valid in place:
    tolerations, root under runAsNonRoot, a request above its limit, '..' in a hostPath."""
    for toleration in values.get("tolerations") or []:
        if not toleration.get("key"):
            toleration["operator"] = "Exists"
        if toleration.get("operator") == "Exists":
            toleration.pop("value", None)
        if "tolerationSeconds" in toleration:
            toleration["effect"] = "NoExecute"
    context = values.get("securityContext") or {}
    if context.get("runAsNonRoot") and context.get("runAsUser") == 0:
        context["runAsUser"] = 1
    for resources in [values.get("resources")] + [node.get("resources") for node in values["nodes"]]:
        requests, limits = (resources or {}).get("requests", {}), (resources or {}).get("limits", {})
        for name in set(requests) & set(limits):
            if quantity_value(requests[name]) > quantity_value(limits[name]):
                limits[name] = requests[name]
    for volume in values.get("volumes") or []:
        if "hostPath" in volume:
            volume["hostPath"]["path"] = "/".join("." if part == ".." else part
                                                  for part in volume["hostPath"]["path"].split("/"))


# 200 values files in all, in shards that pytest-xdist spreads over the workers; make test-fast
# draws the first 50 (the scale marker).
@pytest.mark.parametrize("shard", [0, *(pytest.param(n, marks=pytest.mark.scale) for n in (1, 2, 3))])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=values_strategy())
def test_random_valid_values_render_the_same(helm, shard, values):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "values.yaml"
        path.write_text(yaml.dump(values, Dumper=MixedDumper, allow_unicode=True, width=2**20, sort_keys=False),
                        encoding="utf-8")
        assert_same_workflow(helm, path)


@pytest.mark.parametrize("line", [f"{name}: null" for name in SECTIONS] + ["port: null", "hostNetwork: null",
                                                                           "launcher: {type: null}"])
def test_null_without_meaning_is_refused_by_both(helm, line, tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text((REPO / "examples" / "cluster.yaml").read_text(encoding="utf-8").replace("port: 25195\n",
                                                                                             "") + line + "\n",
                                                                                             encoding="utf-8")
    field = line.split(":")[0] if "{" not in line else "launcher.type"
    from torchdag import pipeline
    from torchdag.errors import ValuesError

    with pytest.raises(ValuesError, match=f"{re.escape(field)}: is null"):
        pipeline.run(path)
    result = helm_template(helm, path)  # a rule the schema states (null-deletes-default): helm names the field
    assert result.returncode != 0, result.stderr
    assert any(spelling in result.stderr for spelling in helm_spellings(field)), result.stderr


def test_helm_spellings_of_a_field():
    assert helm_spellings("nodes[2].nic")[:4] == ["nodes[2].nic", "at '/nodes/2/nic'", "at '/nodes/2/nic'",
                                                  "at '/nodes/2': additional properties 'nic' not allowed"]
    assert helm_spellings("image")[4] == "at '': missing property 'image'"
    assert "at '/labels/torchdag.io~1x'" in helm_spellings("labels['torchdag.io/x']")


@pytest.mark.parametrize("case", BAD_CASES + FIT_CASES, ids=str)
def test_bad_values_are_rejected_naming_the_field(helm, case, tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text(case.text, encoding="utf-8")
    result = helm_template(helm, path)
    assert result.returncode != 0, f"helm accepted {case.id}:\n{result.stdout[:2000]}"
    assert any(spelling in result.stderr for spelling in helm_spellings(case.field)), (
        f"helm's message does not name {case.field}:\n{result.stderr}"
    )


# --- The strategy draws every option ------------------------------------------------------

def schema_options(schema: dict) -> set[str]:
    """Every option of the values file: top-level keys, the keys of its sections, nodes[]'s keys."""
    found = set()
    for key, prop in schema["properties"].items():
        if "$ref" in prop:
            prop = schema["$defs"][prop["$ref"].split("/")[-1]]
        items = prop.get("items") or {}
        if "$ref" in items:
            items = schema["$defs"][items["$ref"].split("/")[-1]]
        if prop.get("type") == "object" and prop.get("properties"):
            found |= {f"{key}.{sub}" for sub in prop["properties"]}
        elif key == "nodes":
            found |= {f"nodes[].{sub}" for sub in items["properties"]}
        else:
            found.add(key)
    return found


def drawn_options(values: dict, objects: set[str]) -> set[str]:
    """The options a values file sets, in schema_options' terms (objects: keys with properties)."""
    found = set()
    for key, value in values.items():
        if key in objects and isinstance(value, dict):
            found |= {f"{key}.{sub}" for sub in value}
        elif key == "nodes":
            found |= {f"nodes[].{sub}" for node in value for sub in node}
        else:
            found.add(key)
    return found


@pytest.mark.scale  # 300 draws of the whole strategy: a check on the strategy, not on a renderer
def test_the_strategy_draws_every_option_of_the_schema():
    """An option no example draws is an option whose parity nobody checks: a new key in
    schema/ must join values_strategy."""
    from torchdag.values import load_schema

    options = schema_options(load_schema())
    objects = {option.split(".")[0] for option in options if "." in option and not option.startswith("nodes[]")}
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(values=values_strategy())
    def collect(values):
        seen.update(drawn_options(values, objects))

    collect()
    assert {"ascend.duoCard", "scheduling.watchCommand", "automountServiceAccountToken",
            "executorServiceAccountName"} <= options
    assert sorted(options - seen) == []
