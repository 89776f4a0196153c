"""Run a rendered Workflow's DAG on this machine: every task as a local process group.

    python -m torchdag.localrun VALUES [--map SRC=DST]... [--cpu] [--timeout S]
                                [--no-gang-stop] [--port N] [--only TASK]... [--dry-run]

VALUES is a torchdag values file (rendered here with render.py's pipeline) or a
Workflow that render.py already wrote. What runs is the rendered YAML: each DAG task's
container command + args with its env, after Argo's `{{...}}` substitution and
Kubernetes' `$(VAR)` expansion, with these local mappings (all printed):

- node addresses -> 127.0.0.1 (launcher --master_addr, preflight --master-addr,
  MASTER_ADDR, HCCL_IF_IP); NICs -> lo (GLOO/NCCL/HCCL/TP_SOCKET_IFNAME, --nic=NAME);
- image paths that do not exist here -> the checkout, by path prefix: `--map SRC=DST`
  (repeatable, first match wins), then the built-in `/opt/torchdag=<this checkout>`;
- `torchrun` / `python3` -> this Python's (its bin directory first on PATH).

Ignored locally: node affinity (every "node" runs here), image, resources, volumes.
See docs/smoke.md. Exit status: 0 every task exited 0; 1 a task failed; 2 invalid
values or usage; 3 refused (cannot run it faithfully here); 124 --timeout or the
Workflow's activeDeadlineSeconds passed; 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import signal
import string
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

import yaml

from .localrun_expand import UnresolvedTag, argo_substitute, kube_command, kube_container_env
from .localrun_procs import MARKER_ENV, ProcessTree, process_table
from .render import SET_ENV_WRAPPER

CHECKOUT = Path(__file__).resolve().parent.parent
DEFAULT_MAPS = [("/opt/torchdag", str(CHECKOUT))]

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_INTERRUPTED = 0, 1, 2, 3, 124, 130

NIC_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
ADDRESS_FLAGS = ("--master_addr", "--master-addr")
PORT_FLAGS = ("--master_port", "--master-port")
# What a pod would not inherit from this shell: a stray GLOO_SOCKET_IFNAME or RANK here
# would silently change what the rendered Workflow means.
_NOT_INHERITED = re.compile(
    r"^(TORCHDAG_|GLOO_|NCCL_|HCCL_|TP_SOCKET_|TORCHELASTIC_|PET_|MASTER_ADDR$|MASTER_PORT$|RANK$|"
    r"WORLD_SIZE$|LOCAL_RANK$|LOCAL_WORLD_SIZE$|GROUP_RANK$|ROLE_RANK$|NODE_RANK$|ASCEND_|CUDA_VISIBLE_DEVICES$)"
)
_LOSS = re.compile(r"\bloss\b[\s:=]*[-+]?(\d|nan\b|inf\b)", re.IGNORECASE)  # "loss 0.123", not "loss.backward()"
DEVICE_FILES = {"cuda": ("/dev", re.compile(r"^nvidia\d+$"), "NVIDIA GPU"),
                "npu": ("/dev", re.compile(r"^davinci\d+$"), "Ascend NPU")}


class LocalRunError(Exception):
    """The Workflow cannot be run here as written; exit status in .code."""

    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.code = code


@dataclass
class Options:
    maps: list[tuple[str, str]] = field(default_factory=list)  # user --map, before DEFAULT_MAPS
    address: str | None = "127.0.0.1"  # None: keep the rendered addresses (netns tests)
    nic: str | None = "lo"  # None: keep the rendered NIC names
    port: int | None = None  # rendezvous port override
    cpu: bool = False  # run GPU/NPU nodes on CPU instead of refusing them
    only: list[str] = field(default_factory=list)  # run only these tasks
    exec_prefix: Callable[["LocalTask"], list[str]] | None = None  # e.g. `ip netns exec NS ...`
    workflow_name: str | None = None  # default: metadata.name, or generateName + 5 random characters


@dataclass
class LocalTask:
    name: str  # the DAG task, e.g. node-0
    template: str
    params: dict[str, str]
    argv: list[str]  # command + args, as the container would exec them (after mapping)
    env: list[tuple[str, str]]  # the container's env list (after substitution, expansion, mapping)
    cwd: str
    device: str  # cpu | cuda | npu, what the node computes on
    notes: list[str] = field(default_factory=list)  # what was changed for running here
    prefix: list[str] = field(default_factory=list)

    def process_env(self, base: dict[str, str], bin_dir: str) -> dict[str, str]:
        env = {k: v for k, v in base.items() if not _NOT_INHERITED.match(k)}
        env["PATH"] = os.pathsep.join([bin_dir] + [p for p in base.get("PATH", "").split(os.pathsep) if p and p != bin_dir])
        env.update(self.env)
        return env


# ---------------------------------------------------------------- loading


def load_workflow(path: str) -> dict:
    """Render a values file (or read a rendered Workflow); ValuesError propagates."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError:
        docs = []
    if len(docs) == 1 and isinstance(docs[0], dict) and str(docs[0].get("apiVersion", "")).startswith("argoproj.io/"):
        return docs[0]
    from .cli import build  # the values pipeline: load, validate, plan, render

    return yaml.safe_load(build(path))


# ---------------------------------------------------------------- preparing


def _workflow_scope(doc: dict, options: Options) -> dict[str, str]:
    meta = doc.get("metadata") or {}
    name = options.workflow_name or meta.get("name")
    if not name:  # Argo appends five random characters to generateName
        name = (meta.get("generateName") or "workflow-") + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
    scope = {
        "workflow.name": name,
        "workflow.namespace": meta.get("namespace") or "default",
        "workflow.serviceAccountName": (doc.get("spec") or {}).get("serviceAccountName") or "default",
        "workflow.uid": "local-" + name,
    }
    for param in ((doc.get("spec") or {}).get("arguments") or {}).get("parameters") or []:
        if "value" in param:
            scope[f"workflow.parameters.{param['name']}"] = str(param["value"])
    return scope


def _dag(doc: dict) -> tuple[dict, dict[str, dict]]:
    spec = doc.get("spec") or {}
    templates = {t["name"]: t for t in spec.get("templates") or []}
    entry = templates.get(spec.get("entrypoint"))
    if not entry or "dag" not in entry:
        raise LocalRunError(f"entrypoint {spec.get('entrypoint')!r} is not a DAG template; localrun runs torchdag's DAG only")
    return entry["dag"], templates


def _map_path(word: str, maps: list[tuple[str, str]]) -> str:
    """An absolute path that does not exist here, through the first prefix map that fits."""
    if not word.startswith("/") or os.path.exists(word):
        return word
    for src, dst in maps:
        src = src.rstrip("/")
        if src and (word == src or word.startswith(src + "/")):
            return str(Path(dst).resolve()) + word[len(src):]
    return word


def _map_word(word: str, maps: list[tuple[str, str]]) -> str:
    """A path word, or the value of `--flag=/path`."""
    if word.startswith("-") and "=" in word:
        flag, _, value = word.partition("=")
        return f"{flag}={_map_path(value, maps)}"
    return _map_path(word, maps)


def _replace_flag(words: list[str], flags: tuple[str, ...], new: Callable[[str], str | None]) -> list[tuple[str, str]]:
    """Rewrite `--flag=V` and `--flag V` in place; returns the (old, new) values changed."""
    changed = []
    for i, word in enumerate(words):
        for flag in flags:
            if word.startswith(flag + "="):
                old = word[len(flag) + 1:]
                value = new(old)
                if value is not None and value != old:
                    words[i] = f"{flag}={value}"
                    changed.append((old, value))
            elif word == flag and i + 1 < len(words):
                old = words[i + 1]
                value = new(old)
                if value is not None and value != old:
                    words[i + 1] = value
                    changed.append((old, value))
    return changed


def _map_nic_list(value: str, nic: str) -> str:
    """`=eth0` -> `=lo`, `eth0,eth1` -> `lo`; NCCL's `^exclude` items are kept."""
    out: list[str] = []
    for item in value.split(","):
        mapped = item if item.startswith("^") or not item else ("=" + nic if item.startswith("=") else nic)
        if mapped not in out:
            out.append(mapped)
    return ",".join(out)


def _device_of(env: dict[str, str], container: dict) -> str:
    if env.get("TORCHDAG_DEVICE") in ("cpu", "cuda", "npu"):
        return env["TORCHDAG_DEVICE"]
    limits = ((container.get("resources") or {}).get("limits") or {})
    if "nvidia.com/gpu" in limits:
        return "cuda"
    if any(k.startswith("huawei.com/") for k in limits):
        return "npu"
    return "cpu"


def _nproc(argv: list[str]) -> int:
    for word in argv:
        for flag in ("--nproc_per_node=", "--nproc-per-node="):
            if word.startswith(flag) and word[len(flag):].isdigit():
                return int(word[len(flag):])
    return 1


def local_devices(kind: str) -> int:
    folder, pattern, _ = DEVICE_FILES[kind]
    try:
        return sum(1 for name in os.listdir(folder) if pattern.match(name))
    except OSError:
        return 0


def _prepare_task(task: dict, template: dict, wf_scope: dict[str, str], options: Options) -> LocalTask:
    name = task["name"]
    if "container" not in template:
        raise LocalRunError(f"{name}: template {template['name']!r} has no container; localrun runs container templates only")
    container = template["container"]
    for entry in container.get("env") or []:
        if "value" not in entry:
            raise LocalRunError(f"{name}: env {entry.get('name')}: valueFrom cannot be resolved outside Kubernetes")

    # Argo: task arguments are resolved in the DAG's scope, then fill the inputs.
    params = {p["name"]: str(p["value"]) for p in (template.get("inputs") or {}).get("parameters") or [] if "value" in p}
    try:
        for p in (task.get("arguments") or {}).get("parameters") or []:
            params[p["name"]] = argo_substitute(str(p.get("value", "")), wf_scope)
        scope = dict(wf_scope)
        scope.update({f"inputs.parameters.{k}": v for k, v in params.items()})
        command = [argo_substitute(str(w), scope) for w in container.get("command") or []]
        args = [argo_substitute(str(w), scope) for w in container.get("args") or []]
        raw_env = [(e["name"], argo_substitute(str(e["value"]), scope)) for e in container.get("env") or []]
        working_dir = argo_substitute(str(container["workingDir"]), scope) if container.get("workingDir") else None
    except UnresolvedTag as err:
        raise LocalRunError(f"{name}: {err} (Argo would fail this workflow)", EXIT_INVALID) from None

    # Kubernetes: env values see earlier entries; command and args see the whole env.
    env_list = kube_container_env(raw_env)
    env_map = dict(env_list)
    command, args = kube_command(command, env_map), kube_command(args, env_map)

    notes: list[str] = []
    if params.get("host"):
        notes.append(f"node affinity kubernetes.io/hostname={params['host']} ignored: runs on this machine")
    device = _device_of(env_map, container)

    if device != "cpu" and options.cpu:
        if command[:4] == ["/bin/bash", "-c", SET_ENV_WRAPPER, "torchdag-set-env"] and len(command) > 4 and not os.path.exists(command[4]):
            notes.append(f"dropped the set_env wrapper: {command[4]} does not exist here")
            command = command[5:]
        for i, word in enumerate(command):
            if word == f"--device={device}":
                command[i] = "--device=cpu"
                notes.append(f"preflight --device={device} -> --device=cpu")
        env_map["TORCHDAG_DEVICE"] = "cpu"
        notes.append(f"TORCHDAG_DEVICE {device} -> cpu (--cpu)")
        if env_map.get("TORCHDAG_BACKEND") in ("nccl", "hccl"):
            notes.append(f"TORCHDAG_BACKEND {env_map['TORCHDAG_BACKEND']} -> gloo (--cpu)")
            env_map["TORCHDAG_BACKEND"] = "gloo"
        device = "cpu"

    launcher = command + args
    if options.address is not None:
        for old, new in _replace_flag(launcher, ADDRESS_FLAGS, lambda _: options.address):
            notes.append(f"master address {old} -> {new}")
        for key in ("MASTER_ADDR", "HCCL_IF_IP"):
            if key in env_map and env_map[key] != options.address:
                notes.append(f"{key} {env_map[key]} -> {options.address}")
                env_map[key] = options.address
    if options.nic is not None:
        for key in NIC_ENV:
            if key in env_map:
                mapped = _map_nic_list(env_map[key], options.nic)
                if mapped != env_map[key]:
                    notes.append(f"{key} {env_map[key]} -> {mapped}")
                    env_map[key] = mapped
        for old, new in _replace_flag(launcher, ("--nic",), lambda v: None if v == "auto" else options.nic):
            notes.append(f"preflight --nic={old} -> --nic={new}")
    if options.port is not None:
        for old, new in _replace_flag(launcher, PORT_FLAGS, lambda _: str(options.port)):
            notes.append(f"port {old} -> {new}")
        if "MASTER_PORT" in env_map:
            env_map["MASTER_PORT"] = str(options.port)

    maps = list(options.maps) + DEFAULT_MAPS
    mapped = [_map_word(word, maps) for word in launcher]
    for old, new in zip(launcher, mapped):
        if old != new:
            notes.append(f"path {old} -> {new}")

    cwd = os.getcwd()
    if working_dir:
        local_dir = _map_path(working_dir, maps)
        if os.path.isdir(local_dir):
            cwd = local_dir
        else:
            notes.append(f"workingDir {working_dir} does not exist here: runs in {cwd}")

    env_out = [(k, env_map[k]) for k in dict(env_list)] + [(k, v) for k, v in env_map.items() if k not in dict(env_list)]
    local = LocalTask(name, template["name"], params, mapped, env_out, cwd, device, notes)
    if options.exec_prefix is not None:
        local.prefix = list(options.exec_prefix(local))
    return local


def prepare(doc: dict, options: Options) -> tuple[str, list[LocalTask]]:
    """(workflow name, the tasks to run) from a rendered Workflow; LocalRunError if it
    cannot run here faithfully."""
    dag, templates = _dag(doc)
    scope = _workflow_scope(doc, options)
    tasks = dag.get("tasks") or []
    names = [t["name"] for t in tasks]
    unknown = [n for n in options.only if n not in names]
    if unknown:
        raise LocalRunError(f"--only {', '.join(unknown)}: no such task (tasks: {', '.join(names)})", EXIT_INVALID)
    out = []
    for task in tasks:
        if task.get("dependencies") or task.get("depends"):
            raise LocalRunError(f"{task['name']}: has dependencies; localrun starts every task at once, as torchdag renders them")
        if options.only and task["name"] not in options.only:
            continue
        if task.get("template") not in templates:
            raise LocalRunError(f"{task['name']}: template {task.get('template')!r} is not in the Workflow", EXIT_INVALID)
        out.append(_prepare_task(task, templates[task["template"]], scope, options))

    problems = []
    if not options.cpu:
        for kind in ("cuda", "npu"):
            needing = [t for t in out if t.device == kind]
            need = sum(_nproc(t.argv) for t in needing)
            have = local_devices(kind) if needing else 0
            if needing and have < need:
                label = DEVICE_FILES[kind][2]
                problems.append(
                    f"{', '.join(t.name for t in needing)}: need{'s' if len(needing) == 1 else ''} {need} {label}(s) "
                    f"and this machine has {have} ({DEVICE_FILES[kind][0]}/{DEVICE_FILES[kind][1].pattern.strip('^$')}); "
                    f"run with --cpu to train those nodes on CPU instead"
                )
    # Python scripts the node would start (script, preflight) must exist once mapped.
    missing: dict[str, list[str]] = {}
    for task in out:
        for word in task.argv:
            path = word.partition("=")[2] if word.startswith("-") else word
            if path.startswith("/") and path.endswith(".py") and not os.path.exists(path):
                missing.setdefault(path, []).append(task.name)
    for path, names in missing.items():
        problems.append(f"{', '.join(names)}: {path} does not exist here; map the image path into this machine with --map SRC=DST")
    if problems:
        raise LocalRunError("\n".join(problems))
    return scope["workflow.name"], out


# ---------------------------------------------------------------- running


@dataclass
class TaskResult:
    name: str
    pid: int | None = None
    returncode: int | None = None
    started: float = 0.0
    ended: float | None = None
    stopped_by_runner: str | None = None  # why the runner stopped it (gang stop, timeout, ...)
    last_loss: str | None = None
    lines: int = 0

    @property
    def duration(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def exit_text(self) -> str:
        if self.returncode is None:
            return "not started" if self.pid is None else "running"
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        return f"exit {self.returncode}"


@dataclass
class Outcome:
    workflow: str
    results: list[TaskResult]
    first_failure: str | None = None  # task name
    timed_out: bool = False
    interrupted: bool = False
    elapsed: float = 0.0

    @property
    def code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.timed_out:
            return EXIT_TIMEOUT
        return EXIT_OK if all(r.returncode == 0 for r in self.results) else EXIT_FAILED


class Supervisor:
    """Starts every task at once, streams their output with a `[task]` prefix, and stops
    whole process trees: a task's leftovers when its main process exits (as a pod's
    would die with it) and, with gang_stop, every other task once one fails."""

    def __init__(self, workflow: str, tasks: list[LocalTask], *, out: TextIO | None = None,
                 gang_stop: bool = True, timeout: float | None = None, grace: float = 5.0,
                 base_env: dict[str, str] | None = None, bin_dir: str | None = None,
                 on_line: Callable[[str, str], None] | None = None, poll: float = 0.1):
        self.workflow = workflow
        self.tasks = tasks
        self.out = out or sys.stdout
        self.gang_stop = gang_stop
        self.timeout = timeout
        self.grace = grace
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.bin_dir = bin_dir or str(Path(sys.executable).parent)
        self.on_line = on_line
        self.poll = poll
        self.results = {t.name: TaskResult(t.name) for t in tasks}
        self.trees: dict[str, ProcessTree] = {}
        self._popens: dict[str, subprocess.Popen] = {}
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._kill_at: dict[str, float] = {}  # task -> when SIGKILL follows the SIGTERM
        self.run_id = f"{os.getpid()}-{time.time_ns()}"
        self._interrupted = False

    def say(self, text: str) -> None:
        with self._lock:
            self.out.write(f"[localrun] {text}\n")
            self.out.flush()

    def request_stop(self, reason: str, interrupted: bool = False) -> None:
        """Stop every task (thread- and signal-handler-safe: acted on by the run loop)."""
        if self._stop_reason is None:
            self._stop_reason = reason
        self._interrupted = self._interrupted or interrupted

    def signal_task(self, name: str, sig: int) -> list[int]:
        """Send sig to one task's whole tree (tests use it to freeze or kill a node)."""
        return self.trees[name].signal(sig)

    def _pump(self, name: str, stream) -> None:
        result = self.results[name]
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if _LOSS.search(line):
                result.last_loss = line.strip()
            result.lines += 1
            with self._lock:
                self.out.write(f"[{name}] {line}\n")
                self.out.flush()
            if self.on_line is not None:
                self.on_line(name, line)
        stream.close()

    def _start(self, task: LocalTask) -> None:
        argv = task.prefix + task.argv
        result = self.results[task.name]
        result.started = time.monotonic()
        # A session of its own: Ctrl-C reaches the runner only, which then stops the trees.
        env = task.process_env(self.base_env, self.bin_dir)
        marker = f"{self.run_id}/{task.name}"
        env[MARKER_ENV] = marker  # inherited by every process of this node: finds its orphans
        popen = subprocess.Popen(argv, env=env, cwd=task.cwd,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self._popens[task.name] = popen
        self.trees[task.name] = ProcessTree(popen.pid, marker)
        result.pid = popen.pid
        self.say(f"{task.name}: pid {popen.pid}: {shlex.join(argv)}")
        reader = threading.Thread(target=self._pump, args=(task.name, popen.stdout), daemon=True)
        reader.start()
        self._readers.append(reader)

    def _stop(self, name: str, reason: str, now: float) -> None:
        if name in self._kill_at or self._popens[name].poll() is not None:
            return
        self.results[name].stopped_by_runner = reason
        self.trees[name].signal(signal.SIGTERM)
        self._kill_at[name] = now + self.grace

    def run(self) -> Outcome:
        begin = time.monotonic()
        outcome = Outcome(self.workflow, [self.results[t.name] for t in self.tasks])
        try:
            for task in self.tasks:
                self._start(task)
        except OSError as err:
            self.say(f"cannot start {task.name}: {err}")
            self.request_stop(f"{task.name} could not start")
            self.results[task.name].returncode = 127
            self.results[task.name].ended = time.monotonic()
            outcome.first_failure = task.name
        deadline = begin + self.timeout if self.timeout else None
        try:
            self._loop(outcome, deadline)
        except KeyboardInterrupt:
            self.request_stop("interrupted", interrupted=True)
            self._loop(outcome, None)
        self._cleanup()
        outcome.interrupted = self._interrupted
        outcome.elapsed = time.monotonic() - begin
        return outcome

    def _loop(self, outcome: Outcome, deadline: float | None) -> None:
        while True:
            now = time.monotonic()
            table = process_table()
            for name, popen in self._popens.items():
                result, tree = self.results[name], self.trees[name]
                tree.refresh(table)
                if result.returncode is None and popen.poll() is not None:
                    result.returncode, result.ended = popen.returncode, now
                    # Pod semantics: when the main process ends, the container's others die with it.
                    tree.signal(signal.SIGKILL)
                    if popen.returncode != 0 and result.stopped_by_runner is None and outcome.first_failure is None:
                        outcome.first_failure = name
                        self.say(f"{name} failed first ({result.exit_text()} after {result.duration:.1f} s)")
                        if self.gang_stop:
                            self.request_stop(f"{name} failed")
            if deadline is not None and now >= deadline and self._stop_reason is None:
                outcome.timed_out = True
                self.request_stop(f"timed out after {self.timeout:g} s")
            if self._stop_reason is not None:
                for name in self._popens:
                    if self.results[name].returncode is None and name not in self._kill_at:
                        self.say(f"stopping {name} ({self._stop_reason})")
                    self._stop(name, self._stop_reason, now)
            for name, when in self._kill_at.items():
                if now >= when and self.trees[name].alive(table):
                    self.trees[name].signal(signal.SIGKILL)
            if all(self.results[name].returncode is not None for name in self._popens):
                return
            time.sleep(self.poll)

    def _cleanup(self) -> None:
        """Nothing we started outlives the run (orphans included: found by their marker)."""
        for tree in self.trees.values():
            tree.signal(signal.SIGKILL)
        for reader in self._readers:
            reader.join(timeout=3)


def summary_lines(outcome: Outcome) -> list[str]:
    width = max([len(r.name) for r in outcome.results] + [4])
    lines = [f"summary of {outcome.workflow} ({outcome.elapsed:.1f} s):"]
    for r in outcome.results:
        if r.returncode == 0:
            status = "ok"
        elif r.stopped_by_runner:
            status = "stopped"
        else:
            status = "FAILED"
        loss = r.last_loss or "-"
        lines.append(f"  {r.name:<{width}}  {status:<7}  {r.exit_text():<18}  {r.duration:6.1f} s  last loss: {loss}")
    if outcome.first_failure:
        stopped = [r.name for r in outcome.results if r.stopped_by_runner and r.name != outcome.first_failure]
        tail = f"; stopped by the runner: {', '.join(stopped)}" if stopped else ""
        first = next(r for r in outcome.results if r.name == outcome.first_failure)
        lines.append(f"{outcome.first_failure} failed first ({first.exit_text()} after {first.duration:.1f} s){tail}")
    if outcome.timed_out:
        lines.append("timed out: every task was stopped")
    if outcome.interrupted:
        lines.append("interrupted: every task was stopped")
    lines.append("result: " + ("every task exited 0" if outcome.code == EXIT_OK else f"FAILED (exit {outcome.code})"))
    return lines


# ---------------------------------------------------------------- command line


def _parse_map(text: str) -> tuple[str, str]:
    src, sep, dst = text.partition("=")
    if not sep or not src.startswith("/") or not dst:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SRC=DST with an absolute SRC, e.g. /opt/torchdag=.")
    return src, dst


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m torchdag.localrun",
        description="Run a torchdag values file's rendered Workflow DAG as local processes (see docs/smoke.md).",
    )
    parser.add_argument("values", help="values file (rendered here) or a Workflow written by render.py")
    parser.add_argument("--map", dest="maps", action="append", default=[], type=_parse_map, metavar="SRC=DST",
                        help="map an image path prefix that does not exist here to DST (repeatable; "
                             "/opt/torchdag=<this checkout> is always last)")
    parser.add_argument("--cpu", action="store_true", help="run GPU/NPU nodes on CPU (TORCHDAG_DEVICE=cpu, gloo) instead of refusing them")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop everything after S seconds (exit 124); the Workflow's activeDeadlineSeconds also applies")
    parser.add_argument("--no-gang-stop", dest="gang_stop", action="store_false",
                        help="when a task fails, leave the others running (as Argo does) until they end on their own")
    parser.add_argument("--grace", type=float, default=5.0, metavar="S", help="seconds between SIGTERM and SIGKILL when stopping a task (default 5)")
    parser.add_argument("--port", type=int, default=None, help="use this rendezvous port instead of the rendered one")
    parser.add_argument("--only", action="append", default=[], metavar="TASK", help="run only this DAG task (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print what would run, with every mapping, and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .problems import ValuesError

    options = Options(maps=args.maps, cpu=args.cpu, port=args.port, only=args.only)
    try:
        doc = load_workflow(args.values)
        workflow, tasks = prepare(doc, options)
    except ValuesError as err:
        for line in err.lines():
            print(line, file=sys.stderr)
        return EXIT_INVALID
    except OSError as err:
        print(f"localrun: {err}", file=sys.stderr)
        return EXIT_INVALID
    except LocalRunError as err:
        for line in str(err).splitlines():
            print(f"localrun: refused: {line}" if err.code == EXIT_REFUSED else f"localrun: {line}", file=sys.stderr)
        return err.code

    out = sys.stdout
    limits = [float(t) for t in (args.timeout, (doc.get("spec") or {}).get("activeDeadlineSeconds")) if t]
    timeout = min(limits) if limits else None
    out.write(f"[localrun] workflow {workflow}: {len(tasks)} task(s) from the rendered DAG, run here"
              f" ({'gang stop on' if args.gang_stop else 'no gang stop'}; timeout {f'{timeout:g} s' if timeout else 'none'})\n")
    for task in tasks:
        for note in task.notes:
            out.write(f"[localrun] {task.name}: {note}\n")
    if args.dry_run:
        for task in tasks:
            out.write(f"[localrun] {task.name}: cwd {task.cwd}\n")
            for key, value in task.env:
                out.write(f"[localrun] {task.name}: env {key}={shlex.quote(value)}\n")
            out.write(f"[localrun] {task.name}: exec {shlex.join(task.prefix + task.argv)}\n")
        return EXIT_OK
    out.flush()

    supervisor = Supervisor(workflow, tasks, out=out, gang_stop=args.gang_stop, timeout=timeout, grace=args.grace)

    def on_signal(signum, _frame):
        supervisor.request_stop(f"the runner got {signal.Signals(signum).name}", interrupted=True)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    outcome = supervisor.run()
    for line in summary_lines(outcome):
        out.write(f"[localrun] {line}\n")
    out.flush()
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
