"""What the real nodes' tooling writes (testbed/node, testbed/images), read back as the
programs read it: containerd's TOML, the kubelet's YAML, the CNI conflist; the addresses of a
cluster's slot; the images' cache keys. Fast tier: nothing is started here (the e2e tier
starts real nodes)."""

from __future__ import annotations

import fcntl
import ipaddress
import json
import tomllib
from pathlib import Path

import pytest
import yaml

from testbed.cluster.layout import Layout
from testbed.images import recipes
from testbed.node import configs, containerd, network, nodes


def test_containerd_config_reads_back_with_a_root_state_and_socket_of_its_own(tmp_path):
    cri = containerd.cri_settings(sandbox_image="localhost/torchdag/pause:1", cni_conf_dir=tmp_path / "net.d",
                                  runc_root=tmp_path / "runc")
    text = containerd.render_toml(containerd.config(tmp_path / "root", tmp_path / "state", tmp_path / "c.sock", cri))
    parsed = tomllib.loads(text)
    assert (parsed["version"], parsed["root"], parsed["state"]) == (2, str(tmp_path / "root"), str(tmp_path / "state"))
    assert parsed["grpc"]["address"] == str(tmp_path / "c.sock")
    plugin = parsed["plugins"]["io.containerd.grpc.v1.cri"]
    # what this machine needs (CAP_SYS_RESOURCE withheld; cgroupfs, no systemd)
    assert plugin["restrict_oom_score_adj"] is True
    runc = plugin["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is False and runc["options"]["Root"] == str(tmp_path / "runc")
    assert plugin["cni"]["conf_dir"] == str(tmp_path / "net.d") and plugin["stream_server_address"] == "127.0.0.1"
    assert "io.containerd.grpc.v1.cri" not in parsed["disabled_plugins"]
    # without CRI settings: the image store's importer, which serves no kubelet
    bare = tomllib.loads(containerd.render_toml(containerd.config(tmp_path, tmp_path, tmp_path / "s")))
    assert "io.containerd.grpc.v1.cri" in bare["disabled_plugins"]


def test_a_slots_addresses_stay_in_its_own_part_of_the_test_range():
    test_range = ipaddress.ip_network("198.18.0.0/15")
    seen = set()
    for index in range(network.SLOTS):
        slot = network.Slot(index)
        assert slot.range.subnet_of(test_range) and slot.services.subnet_of(slot.range)
        addresses = {slot.service_ip, slot.dns_ip, *(slot.node_ip(k) for k in range(network.MAX_NODES))}
        subnets = [slot.pod_subnet(k) for k in range(network.MAX_NODES)]
        assert all(ipaddress.ip_address(a) in slot.range for a in addresses)
        assert all(s.subnet_of(slot.range) and not s.overlaps(slot.services) for s in subnets)
        assert not any(a.overlaps(b) for i, a in enumerate(subnets) for b in subnets[i + 1:])
        assert all(ipaddress.ip_address(a) not in s for a in addresses for s in subnets)
        assert not seen & {slot.range}
        seen.add(slot.range)
        names = [slot.bridge(k) for k in range(network.MAX_NODES)] + [slot.service_bridge]
        assert all(len(name) <= 15 for name in names)  # IFNAMSIZ
    assert not any(a.overlaps(b) for a in seen for b in seen if a is not b)


def test_kubelet_config_keeps_each_node_apart(tmp_path):
    slot = network.Slot(3)
    text = configs.kubelet_config(slot=slot, address=slot.node_ip(1), port=40001, healthz_port=40002,
                                  runtime_socket=tmp_path / "containerd.sock", cgroup_root="/torchdag/3.1",
                                  client_ca=tmp_path / "ca.crt")
    config = yaml.safe_load(text)
    assert config["kind"] == "KubeletConfiguration" and config["address"] == slot.node_ip(1)
    assert (config["port"], config["healthzPort"], config["readOnlyPort"]) == (40001, 40002, 0)
    assert config["cgroupDriver"] == "cgroupfs" and config["failCgroupV1"] is False
    assert config["cgroupRoot"] == "/torchdag/3.1" and config["clusterDNS"] == [slot.dns_ip]
    assert config["authentication"]["anonymous"]["enabled"] is False and config["authorization"]["mode"] == "Webhook"
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path / 'containerd.sock'}"
    assert config["resolvConf"] == "" and config["volumePluginDir"].startswith("/var/lib/kubelet/")


def test_cni_conflist_gives_the_node_its_own_pod_subnet_on_its_bridge(tmp_path):
    slot = network.Slot(5)
    conf = json.loads(configs.cni_conflist(slot=slot, k=2, bridge=slot.bridge(2), ipam_dir=tmp_path))
    (bridge,) = conf["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == slot.bridge(2)
    # the gateway is already on the bridge: isGateway would switch forwarding on for the whole machine
    assert bridge["isGateway"] is False and bridge["ipMasq"] is False
    ((subnet,),) = bridge["ipam"]["ranges"]
    assert subnet == {"subnet": str(slot.pod_subnet(2)), "gateway": slot.pod_gateway(2)}
    assert bridge["ipam"]["dataDir"] == str(tmp_path)


def test_image_keys_follow_their_inputs_and_their_parents(monkeypatch):
    all_recipes = recipes.recipes()
    keys = recipes.keys(all_recipes)
    assert keys == recipes.keys(recipes.recipes())  # the same tree, the same keys
    assert len(set(keys.values())) == len(keys)
    changed = dict(all_recipes)
    changed["python3"] = recipes.Recipe("python3", "base", {"apt": ["python3", "python3-pip", "python3-numpy"]})
    moved = recipes.keys(changed)
    # python3 and everything built on it change; what does not descend from it keeps its key
    assert {name for name in keys if keys[name] != moved[name]} == {"python3", "pytorch", "torchdag"}
    assert all(not recipe.public or recipe.name in keys for recipe in all_recipes.values())
    assert recipes.torch_requirement().startswith("torch==")


def test_the_torchdag_image_key_covers_what_the_dockerfile_copies():
    context = {str(path.relative_to(recipes.REPO_ROOT)) for path in recipes.dockerfile_context()}
    assert {"Dockerfile", "torchdag/catalog.yaml", "trainer/train.py"} <= context
    assert not any(part.startswith(("tests/", ".venv")) for part in context)
    assert Path(recipes.REPO_ROOT / ".dockerignore").read_text().count("!trainer/") == 1


def test_stopping_a_node_kills_every_process_that_names_its_folder_and_no_other(tmp_path):
    """The orphan guard: a process is the node's by its command line, whatever its pid file says
    (a kubelet whose pid file had gone kept the cgroup root of the next cluster's node)."""
    import subprocess
    import sys

    from testbed.node.nodes import kill_naming

    home = tmp_path / "0.1"
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    argvs = {"kubelet": [*sleeper, f"--config={home}/kubelet.yaml"],
             "shim": [*sleeper, "-address", f"{home}/containerd.sock"],
             "the folder itself": [*sleeper, str(home)],
             "plugin": [*sleeper, f"--dev-dir={home}/dev"],
             "a sibling": [*sleeper, f"--config={tmp_path}/0.10/kubelet.yaml"],
             "a path that only contains it": [*sleeper, f"/elsewhere{home}/x"]}
    procs = {what: subprocess.Popen(argv) for what, argv in argvs.items()}
    try:
        named = ("kubelet", "shim", "the folder itself", "plugin")
        assert sorted(kill_naming(home)) == sorted(procs[what].pid for what in named)
        for what, proc in procs.items():
            if what in named:
                assert proc.wait(timeout=10) == -9, what
            else:
                assert proc.poll() is None, what
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_two_clusters_never_share_a_network_slot_once_one_has_assigned_its_first_node(tmp_path, monkeypatch):
    """A cluster's claim holds while its state.json names the slot. The first node's assignment
    claims the slot and then writes the state back; in CI's two workers, a state written without
    the slot let the other cluster take the same addresses (its pods then reached the wrong API
    server: `x509: ... ECDSA verification failure ... torchdag-local-ca`)."""
    monkeypatch.setattr(network, "CLAIMS", tmp_path / "claims")
    monkeypatch.setattr(network, "release", lambda slot, force=False: None)  # no links to remove here

    def save_under_the_lock(layout):
        def save(state):
            with open(network.CLAIMS / "lock", "a+") as other, pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another cluster's claim waits
            layout.write_state(state)
        return save

    first, second = Layout(tmp_path / "a"), Layout(tmp_path / "b")
    monkeypatch.setattr(nodes, "slot_of", lambda layout: network.claim(layout.root, layout.read_state(),
                                                                      save_under_the_lock(layout)))
    nodes.RealNodes(first, say=lambda line: None)._assign(nodes.NodeSpec("cpu-0"))
    assert first.read_state()["slot"] == 0 and "cpu-0" in first.read_state()["nodes"]
    assert nodes.slot_of(second).index == 1
