"""Values that render cleanly but that Argo's controller, the kubelet or the API server would
refuse or undo at run time: refused by both renderers, one line naming the field (render.py:
`file: field: message`, exit 2, nothing written; helm: the field in its error). Beside each
kind, near misses both accept alike.

Kinds: a node address the other machines cannot reach; names and paths Argo owns; bare
numbers as byte quantities; annotations no pod is admitted with; image references the
kubelet cannot parse; length limits inside names; empty words of a command."""

from __future__ import annotations

import re

import pytest

from chart_helpers import argo_document, helm_spellings, helm_template
from cli_helpers import BASE, render_py, write
from torchdag import cli, pipeline

HEX = "0123456789abcdef" * 8


def _nodes(*nodes: str) -> str:
    """A `nodes:` block of flow mappings, the first the master."""
    return "nodes:\n" + "".join(f"  - {{{node}}}\n" for node in nodes)


def _pair(address: str, field: str = "address") -> str:
    """Two machines, the second's address (or, without one, its name) given."""
    second = f"name: n2, address: '{address}'" if field == "address" else f"name: '{address}'"
    return _nodes("name: n1, address: 10.0.0.1, master: true", second)


def _reach(kind: str, addresses: list[str]) -> list[tuple]:
    return [(f"{kind}-{field}-{address}", _pair(address, field), f"nodes[1].{field}", f"'{address}' is")
            for address in addresses for field in ("address", "name")]


LOOPBACK = ["127.0.0.1", "127.1.2.3", "127.255.255.254", "localhost", "api.localhost", "localhost.localdomain",
            "localhost6.localdomain6", "ip6-localhost", "ip6-loopback"]
UNSPECIFIED = ["0.0.0.0", "0.1.2.3"]
MULTICAST = ["224.0.0.1", "239.255.255.250", "232.1.1.1"]
RESERVED = ["255.255.255.255", "240.0.0.1", "250.1.2.3"]

# (id, lines replacing BASE's keys, the field render.py names, a fragment of its message)
REFUSED = [
    # 1. the master (any node) at an address the other machines cannot reach, in a job of two or more
    *_reach("loopback", LOOPBACK),
    *_reach("unspecified", UNSPECIFIED),
    *_reach("multicast", MULTICAST),
    *_reach("reserved", RESERVED),
    ("nic-lo", _nodes("name: n1, nic: lo, master: true", "name: n2, nic: eth0"), "nodes[0].nic",
     "lo is the loopback interface"),
    ("network-nic-lo", "network: {mode: pod, nic: lo}\n", "network.nic", "lo is the loopback interface"),
    ("address-is-another-machines-name", _nodes("name: n1, address: n2, master: true", "name: n2, address: 10.0.0.2"),
     "nodes[0].address", "is the name of nodes[1]"),
    ("address-is-a-later-machines-name", _nodes("name: n1, master: true", "name: n2, address: n3", "name: n3"),
     "nodes[1].address", "is the name of nodes[2]"),
    # 5. dupaddr names the field that holds the address: the name, where a node has no address key
    ("duplicate-address-held-by-the-name", _nodes("name: n1, address: n2, master: true", "name: n2"),
     "nodes[1].name", "is also the address of nodes[0]"),
    # 2. names and paths Argo owns in every pod
    *[(f"argo-volume-{name}", f"volumes: [{{name: {name}, mountPath: /d, persistentVolumeClaim: {{claimName: c}}}}]\n",
       "volumes[0].name", "Argo's controller adds to every pod") for name in ("var-run-argo", "tmp-dir-argo",
                                                                         "exec-sa-token")],
    *[(f"argo-mount-{index}", f"volumes: [{{name: d, mountPath: '{path}', persistentVolumeClaim: {{claimName: c}}}}]\n",
       "volumes[0].mountPath", "where Argo's controller mounts its executor")
      for index, path in enumerate(["/var/run/argo", "/var/run/argo/", "/var/run/argo/bin", "//var/./run/x/../argo",
                                    "/run/argo", "/run/argo/x"])],
    # 4. a quantity of bytes without a unit
    ("shm-bare-number", "shmSize: 16\n", "shmSize", "a quantity without a unit counts bytes"),
    ("shm-quoted-number", "shmSize: '512'\n", "shmSize", "less than 1Mi"),
    ("shm-kilobytes", "shmSize: 500k\n", "shmSize", "less than 1Mi"),
    ("shm-milli", "shmSize: 900m\n", "shmSize", "less than 1Mi"),
    ("memory-bare-request", "resources: {requests: {memory: 64}}\n", "resources.requests.memory", "less than 1Mi"),
    ("memory-bare-limit", "resources: {limits: {memory: 1000000}}\n", "resources.limits.memory", "less than 1Mi"),
    ("memory-node-own", _nodes("name: n1, master: true, resources: {limits: {memory: '1023Ki'}}", "name: n2"),
     "nodes[0].resources.limits.memory", "less than 1Mi"),
    # 7. annotations that make every pod inadmissible
    ("apparmor-unconfined-under-baseline",
     "podSecurity: baseline\nnetwork: {mode: pod}\nascend: {mountDriver: false}\n"
     "annotations: {container.apparmor.security.beta.kubernetes.io/main: unconfined}\n",
     "annotations['container.apparmor.security.beta.kubernetes.io/main']", "Pod Security baseline"),
    ("apparmor-unconfined-under-restricted",
     "podSecurity: restricted\nnetwork: {mode: pod}\nascend: {mountDriver: false}\n"
     "securityContext: {runAsNonRoot: true, runAsUser: 1000}\n"
     "annotations: {container.apparmor.security.beta.kubernetes.io/init: unconfined}\n",
     "annotations['container.apparmor.security.beta.kubernetes.io/init']", "Pod Security baseline"),
    *[(f"apparmor-wait-with-resource-pods-{index}", lines
       + "annotations: {container.apparmor.security.beta.kubernetes.io/wait: runtime/default}\n",
       "annotations['container.apparmor.security.beta.kubernetes.io/wait']", "do not have")
      for index, lines in enumerate(["network: {mode: pod}\n", "hostNetwork: false\n",
                                     "scheduling: {gang: volcano}\n", "scheduling: {gang: coscheduling}\n"])],
    ("apparmor-not-a-profile", "annotations: {container.apparmor.security.beta.kubernetes.io/main: strict}\n",
     "annotations['container.apparmor.security.beta.kubernetes.io/main']", "not an AppArmor profile"),
    ("apparmor-unknown-container", "annotations: {container.apparmor.security.beta.kubernetes.io/trainer: "
                                   "runtime/default}\n",
     "annotations['container.apparmor.security.beta.kubernetes.io/trainer']", "names a container the pods do not have"),
    ("seccomp-main-unconfined-against-runtime-default",
     "annotations: {container.seccomp.security.alpha.kubernetes.io/main: unconfined}\n",
     "annotations['container.seccomp.security.alpha.kubernetes.io/main']", "contradicts containerSecurity"),
    ("seccomp-main-localhost-against-runtime-default",
     "annotations: {container.seccomp.security.alpha.kubernetes.io/main: localhost/p.json}\n",
     "annotations['container.seccomp.security.alpha.kubernetes.io/main']", "contradicts containerSecurity"),
    ("seccomp-main-runtime-default-against-unconfined",
     "containerSecurity: {seccompProfile: Unconfined}\n"
     "annotations: {container.seccomp.security.alpha.kubernetes.io/main: runtime/default}\n",
     "annotations['container.seccomp.security.alpha.kubernetes.io/main']", "contradicts containerSecurity"),
    ("seccomp-pod-under-restricted",
     "podSecurity: restricted\nnetwork: {mode: pod}\nascend: {mountDriver: false}\n"
     "securityContext: {runAsNonRoot: true, runAsUser: 1000}\n"
     "annotations: {seccomp.security.alpha.kubernetes.io/pod: unconfined}\n",
     "annotations['seccomp.security.alpha.kubernetes.io/pod']", "contradicts the pod's seccompProfile"),
    ("seccomp-not-a-profile", "annotations: {seccomp.security.alpha.kubernetes.io/pod: default}\n",
     "annotations['seccomp.security.alpha.kubernetes.io/pod']", "not a seccomp profile"),
    # 9. image references the kubelet cannot parse (distribution/reference, go-digest)
    ("digest-short", f"image: 'train:1@sha256:{HEX[:63]}'\n", "image", "is not an image reference"),
    ("digest-long", f"image: 'train@sha256:{HEX[:65]}'\n", "image", "is not an image reference"),
    ("digest-upper-hex", f"image: 'train@sha256:{HEX[:64].upper()}'\n", "image", "is not an image reference"),
    ("digest-unknown-algorithm", f"image: 'train@md5:{HEX[:32]}'\n", "image", "is not an image reference"),
    ("digest-sha512-short", f"image: 'train@sha512:{HEX[:96]}'\n", "image", "is not an image reference"),
    ("digest-algorithm-upper", f"image: 'train@SHA256:{HEX[:64]}'\n", "image", "is not an image reference"),
    ("image-hex-only", f"image: '{HEX[:64]}'\n", "image", "64 hexadecimal digits"),
    ("image-name-256", f"image: 'registry.example.com/{'a' * 235}'\n", "image", "name of 256 characters"),
    ("image-name-over-with-tag", f"image: 'r.io:5000/team/{'b' * 250}:v1'\n", "image", "the kubelet cannot parse"),
    ("image-name-over-as-docker-io", f"image: '{'c' * 240}:latest'\n", "image", "as docker.io/"),
    ("image-name-over-as-docker-io-path", f"image: 'team/{'d' * 241}'\n", "image", "as docker.io/"),
    # 13. length limits inside names
    ("label-prefix-254", f"labels: {{{'a' * 254}/x: v}}\n", f"labels['{'a' * 254}/x']", "prefix (before '/') over 253"),
    ("annotation-prefix-254", f"annotations: {{{'b.' * 126}bb/x: v}}\n", f"annotations['{'b.' * 126}bb/x']",
     "over 253"),
    ("node-selector-prefix-254", f"nodeSelector: {{{'c' * 300}/x: v}}\n", f"nodeSelector['{'c' * 300}/x']",
     "over 253"),
    ("toleration-prefix-254", f"tolerations: [{{key: '{'d' * 260}/k', operator: Exists}}]\n", "tolerations[0].key",
     "over 253"),
    ("address-label-64", _nodes(f"name: n1, address: {'a' * 64}.example.com, master: true", "name: n2"),
     "nodes[0].address", "over 63 characters between dots"),
    ("address-last-label-64", _nodes(f"name: n1, address: x.{'b' * 64}, master: true", "name: n2"),
     "nodes[0].address", "over 63 characters between dots"),
    ("cluster-domain-label-64", f"network: {{mode: pod, clusterDomain: cluster.{'c' * 64}}}\n",
     "network.clusterDomain", "over 63 characters between dots"),
    # 14. empty words of a command
    ("preflight-empty-program", "preflight: {command: ['']}\n", "preflight.command[0]", "no program starts"),
    ("preflight-blank-program", "preflight: {command: [' ', x.py]}\n", "preflight.command[0]", "is not a program name"),
    ("preflight-program-with-its-argument", "preflight: {command: ['python3 -u', x.py]}\n", "preflight.command[0]",
     "is not a program name"),
    ("preflight-empty-argument", "preflight: {command: [python3, '']}\n", "preflight.command[1]", "is an empty word"),
    ("preflight-empty-third-word", "preflight: {command: [python3, x.py, '']}\n", "preflight.command[2]",
     "is an empty word"),
    ("watch-empty-program", "scheduling: {gang: volcano, watchCommand: ['']}\n", "scheduling.watchCommand[0]",
     "no program starts"),
    ("watch-empty-argument", "scheduling: {gang: volcano, watchCommand: [python3, '', w.py]}\n",
     "scheduling.watchCommand[1]", "is an empty word"),
    ("launcher-empty-extra-arg", "launcher: {extraArgs: ['']}\n", "launcher.extraArgs[0]",
     "take as the script's path"),
]

ACCEPTED = [
    # one machine may talk to itself; a DNS name that only looks alike; link-local and private addresses
    ("one-machine-on-loopback", _nodes("name: localhost, nic: lo, address: 127.0.0.1")),
    ("lookalike-addresses", _nodes("name: n1, address: localhost-1.example.com, master: true",
                                   "name: n2, address: 169.254.1.2", "name: n3, address: 223.255.255.1",
                                   "name: n4, address: 1.0.0.1", "name: n5, address: my.localhost.example",
                                   "name: n6, address: 10.0.0.6, nic: lo0")),
    ("own-name-as-own-address", _nodes("name: n1, address: n1, master: true", "name: n2, address: n2")),
    # on the pod network addresses are unused (warned) and names only pin pods
    ("pod-network-names", "network: {mode: pod}\n" + _nodes("name: n1, master: true", "name: localhost")),
    ("argo-lookalike-volumes", "volumes: [{name: var-run-argo2, mountPath: /var/run/argos, persistentVolumeClaim: "
                               "{claimName: c}}, {name: argo, mountPath: /var/run, persistentVolumeClaim: "
                               "{claimName: d}}]\n"),
    ("byte-quantities", "shmSize: 1Mi\nresources: {requests: {memory: 1048576, cpu: 0.5}, limits: {memory: 64Gi}}\n"),
    ("zero-memory-request", "resources: {requests: {memory: 0}}\n"),
    ("annotations-the-api-server-takes",
     "annotations: {container.apparmor.security.beta.kubernetes.io/main: localhost/train, "
     "container.apparmor.security.beta.kubernetes.io/wait: unconfined, "
     "container.seccomp.security.alpha.kubernetes.io/main: docker/default, "
     "container.seccomp.security.alpha.kubernetes.io/wait: unconfined, "
     "seccomp.security.alpha.kubernetes.io/pod: runtime/default}\n"),
    ("apparmor-wait-without-resource-pods", "scheduling: {gang: kueue, queue: q}\n"
                                            "annotations: {container.apparmor.security.beta.kubernetes.io/wait: "
                                            "runtime/default}\n"),
    ("apparmor-runtime-default-under-baseline",
     "podSecurity: baseline\nnetwork: {mode: pod}\nascend: {mountDriver: false}\n"
     "annotations: {container.apparmor.security.beta.kubernetes.io/main: runtime/default}\n"),
    ("seccomp-unset-field", "containerSecurity: {seccompProfile: ''}\n"
                            "annotations: {container.seccomp.security.alpha.kubernetes.io/main: unconfined}\n"),
    ("digests", f"image: 'r.io/t@sha384:{HEX[:96]}'\n"),
    ("digest-sha512-with-tag", f"image: 'r.io/t:v2@sha512:{HEX}'\n"),
    ("image-name-255", f"image: 'x.io/{'a' * 250}:{'T' * 128}'\n"),
    ("image-name-255-as-docker-io", f"image: '{'a' * 237}'\n"),
    ("image-hex-with-a-tag", f"image: '{HEX[:64]}:v1'\n"),
    ("prefix-253-and-labels-63", f"labels: {{{('a' * 63 + '.') * 3}{'b' * 61}/x: v}}\n"
                                 f"tolerations: [{{key: '{'c' * 253}/k', operator: Exists}}]\n"),
    ("dns-labels-63", _nodes(f"name: n1, address: {'a' * 63}.example.com, master: true", "name: n2")
     + f"network: {{clusterDomain: {'c' * 63}.local}}\n"),
    ("commands", "preflight: {command: [/opt/py/bin/python3, -u, x.py]}\n"
                 "launcher: {extraArgs: [--monitor-interval=1]}\nargs: ['', x]\n"),
]


def _values(tmp_path, lines: str):
    text = BASE
    for line in lines.splitlines():  # a key the lines set replaces BASE's line (and its block)
        if re.match(r"[A-Za-z]", line):
            key = line.split(":")[0]
            text = re.sub(rf"^{re.escape(key)}:.*\n(?:[ -].*\n)*", "", text, flags=re.MULTILINE)
    return write(tmp_path, text + lines)


@pytest.mark.parametrize("lines, field, fragment", [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_render_py_refuses_naming_the_field(lines, field, fragment, tmp_path, capsys):
    """render.py's main in this process (render.py is `sys.exit(main())`): a hundred cases
    without a hundred interpreter starts; test_render_py_refuses_in_its_own_process runs one
    as a process."""
    values = _values(tmp_path, lines)
    out = tmp_path / "out" / "workflow.yaml"
    code = cli.main([str(values), "-o", str(out)])
    done = capsys.readouterr()
    assert code == 2 and done.out == "" and not out.parent.exists(), done.err
    lines_out = [line for line in done.err.splitlines() if not line.startswith("warning:")]
    assert any(line.startswith(f"{values}: {field}: ") and fragment in line for line in lines_out), done.err


def test_render_py_refuses_in_its_own_process(tmp_path):
    _, lines, field, fragment = REFUSED[0]
    values = _values(tmp_path, lines)
    out = tmp_path / "out" / "workflow.yaml"
    done = render_py(str(values), "-o", str(out))
    assert done.returncode == 2 and done.stdout == "" and not out.parent.exists(), done.stderr
    assert any(line.startswith(f"{values}: {field}: ") and fragment in line for line in done.stderr.splitlines())


@pytest.mark.parametrize("lines, field", [case[1:3] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_helm_refuses_naming_the_field(lines, field, helm, tmp_path):
    result = helm_template(helm, _values(tmp_path, lines))
    assert result.returncode != 0, result.stdout[:2000]
    assert any(spelling in result.stderr for spelling in helm_spellings(field)), result.stderr


@pytest.mark.parametrize("lines", [case[1] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_near_misses_are_accepted_alike(lines, helm, tmp_path):
    values = _values(tmp_path, lines)
    ours = argo_document(pipeline.run(values).text)
    result = helm_template(helm, values)
    assert result.returncode == 0, result.stderr
    assert ours["spec"] == argo_document(result.stdout)["spec"]
