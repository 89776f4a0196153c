"""Properties of how render.py reads and refuses values, over generated input:

- whatever the values hold, render.py renders a valid Workflow or reports ValuesError
  lines, never a traceback from deeper in the pipeline (mangled values, as data);
- hostile YAML text is refused with the right one-line message: alias bombs, deep nesting,
  numbers that are not finite or too large, Unicode whitespace in patterned strings;
- whatever `-o` names (the values file by another name, links, devices, FIFOs, folders),
  render.py writes the Workflow or says "cannot write" and exits 1, the values file and any
  link left as they were.

No input may make render.py run longer than 10 s or print a traceback. Every example is
checked for that, like this:
- the pipeline runs in this process under `hard_limit(10)`: an interval timer (SIGALRM)
  raises `Hang` inside whatever is running after 10 s of wall time, so the example fails
  with the stack where it hung (a guard against hangs, not a speed assertion: examples take
  milliseconds); `faulthandler.dump_traceback_later` is the backstop for a hang in C code
  that never returns to Python for the signal to be handled: at 20 s it prints every
  thread's stack and ends the test process, which pytest reports as a crash;
- a traceback is any exception other than ValuesError leaving `build()`, or any
  exception leaving `main()` (which catches what it reports): hypothesis then shows it;
  and main()'s stderr must be one-line messages, exit status 0, 1 or 2;
- `test_render_py_process_never_hangs_or_tracebacks` runs render.py as a real process on a
  few generated files with `timeout=10` and asserts no "Traceback" on stderr, which also
  catches what only a real interpreter prints (errors flushing stdout at exit).
"""

from __future__ import annotations

import contextlib
import copy
import faulthandler
import io
import math
import os
import signal
import stat
import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from argo_helpers import validate_argo
from bad_cases import BASE
from torchdag import pipeline
from torchdag.cli import main
from torchdag.errors import ValuesError, format_path
from torchdag.values import load_schema

LIMIT_S = 10
# The limits docs/values.md promises, written out (not imported from the code under test).
DOCUMENTED_DEPTH = 100
DOCUMENTED_ALIAS_VALUES = 50_000

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=12),
                    st.sampled_from(["", "auto", "eth0", "cpu", "nvidia", "ascend910", "gloo", "16Gi", "/x"]))
anything = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                                                         max_leaves=8)
TOP_KEYS = sorted(load_schema()["properties"])
NODE_KEYS = sorted(load_schema()["$defs"]["node"]["properties"])
FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class Hang(BaseException):
    """Raised by hard_limit's timer; a BaseException, so no `except Exception` swallows it."""


@contextlib.contextmanager
def hard_limit(seconds: float = LIMIT_S):
    """Fail whatever runs inside if it is still running after `seconds` (see the module docstring)."""
    faulthandler.dump_traceback_later(2 * seconds, exit=True)
    timer = threading.current_thread() is threading.main_thread()
    if timer:
        def on_alarm(signum, frame):
            raise Hang(f"still running after {seconds} s")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()


def test_the_guard_stops_a_hang():
    """Guards the guard: a loop that never ends is interrupted, not waited for."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGALRM needs the main thread")
    with pytest.raises(Hang):
        with hard_limit(0.2):
            while True:
                pass


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """cli.main in this process, under the guard: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with hard_limit(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    assert status in (0, 1, 2), status
    assert "Traceback" not in err.getvalue()
    return status, out.getvalue(), err.getvalue()


# --- values as data ----------------------------------------------------------------------

@st.composite
def mangled_values(draw):
    values = copy.deepcopy(BASE)
    # null deletes a default (Helm's rule), so many mangled files are still valid
    plausible = st.one_of(st.none(), st.sampled_from([{}, [], "", 0, 1, True, False]), anything)
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            values[draw(st.sampled_from(TOP_KEYS))] = draw(plausible)
        else:
            nodes = values.get("nodes")
            node = nodes[draw(st.integers(0, len(nodes) - 1))] if isinstance(nodes, list) and nodes else None
            if isinstance(node, dict):
                node[draw(st.sampled_from(NODE_KEYS))] = draw(plausible)
    return values


@settings(FAST, max_examples=400)
@given(values=mangled_values())
def test_any_values_render_or_fail_cleanly(values, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "cluster.yaml"
    path.write_text(yaml.safe_dump(values, allow_unicode=True), encoding="utf-8")
    try:
        with hard_limit():
            text = pipeline.run(path).text
    except ValuesError as err:
        assert err.lines() and all(line.startswith(f"{path}: ") and "\n" not in line for line in err.lines())
        event("rejected")
        return
    event("rendered")
    validate_argo(yaml.safe_load(text))


# --- hostile YAML text -------------------------------------------------------------------

# Where a hazard is put: (path, value in BASE or None). Scalars of every type the schema has.
FIELDS = [
    ("port",), ("name",), ("image",), ("namespace",), ("args", 0), ("nodes", 0, "devices"), ("nodes", 1, "nic"),
    ("nodes", 2, "name"), ("nodes", 0, "address"), ("resources", "requests", "cpu"), ("resources", "limits", "memory"),
    ("securityContext", "runAsUser"), ("timeouts", "rendezvous"), ("env", "FOO"), ("labels", "team"),
    ("tolerations", 0, "tolerationSeconds"),
]
# Strings whose pattern is anchored at both ends, with a value it accepts.
PATTERNED = {
    ("name",): "bladetrain", ("namespace",): "ml", ("image",): "registry.example.com/img:1",
    ("nodes", 1, "nic"): "enp125s0f0", ("nodes", 2, "name"): "node-3", ("nodes", 0, "address"): "10.0.0.1",
    ("labels", "team"): "research", ("serviceAccountName",): "trainer", ("resources", "requests", "cpu"): "500m",
    ("shmSize",): "16Gi", ("imagePullSecrets", 0): "regcred", ("nodeSelector", "pool"): "a100",
}
UNICODE_SPACES = ["\u00a0", "\u2028", "\u2029", "\u3000", "\u0085", "\u1680", "\u2000", "\u2007", "\u200a", "\u200b",
                  "\u202f", "\u205f", "\ufeff", "\t", " ", "\v", "\f"]
# Raw in a plain scalar these stay inside it; U+2028, U+2029 and U+0085 are YAML line breaks.
RAW_SAFE_SPACES = ["\u00a0", "\u3000", "\u1680", "\u2000", "\u2007", "\u200a", "\u200b", "\u202f", "\u205f", "\ufeff"]
NON_FINITE = {".inf": ".inf", ".Inf": ".inf", ".INF": ".inf", "+.inf": ".inf", "-.inf": "-.inf", "-.Inf": "-.inf",
              ".nan": ".nan", ".NaN": ".nan", ".NAN": ".nan"}
# Beyond 2^53 (Helm's float64 loses digits), beyond int64, beyond uint64, in every base.
BIG_INTEGERS = ["9007199254740993", "-9007199254740993", "9223372036854775807", "9223372036854775808",
                "-9223372036854775809", "18446744073709551616", "99999999999999999999", "0x7fffffffffffffffff",
                "0o7777777777777777777777", "1_000_000_000_000_000_000", str(10**40)]
# Out of float64's range or odd spellings: go-yaml keeps `1e400` a string; none may render as inf.
ODD_NUMBERS = ["1e400", "-1e400", "1e-400", "1e308", "-1.7976931348623157e308", "0o17", "017", "09", "1:30", "+.5",
               "-.5", "1_000", "0b101", "0x1F", "=", "1e3", ".5e3", "0.", "-0", "+1"]


def _set(values: dict, path: tuple, value) -> None:
    target = values
    for part, after in zip(path, path[1:]):
        if isinstance(target, list):
            while len(target) <= part:
                target.append({} if isinstance(after, str) else [])
            target = target[part]
        else:
            target = target.setdefault(part, {} if isinstance(after, str) else [])
    if isinstance(target, list):
        while len(target) <= path[-1]:
            target.append(None)
    target[path[-1]] = value


def with_hazard(path: tuple, hazard: str, prefix: str = "") -> str:
    """BASE as YAML with `hazard` (YAML text) as the value at `path`, `prefix` lines first."""
    values = copy.deepcopy(BASE)
    if path[0] == "tolerations":
        values["tolerations"] = [{"key": "k", "operator": "Exists"}]
    _set(values, path, "__HAZARD__")
    return prefix + yaml.safe_dump(values, sort_keys=False, allow_unicode=True).replace("__HAZARD__", hazard)


def nested(depth: int, kind: str) -> str:
    if kind == "flow-list":
        return "[" * depth + "]" * depth
    if kind == "flow-map":
        return "{a: " * depth + "1" + "}" * depth
    return "[" * (depth // 2) + "{a: " * (depth - depth // 2) + "1" + "}" * (depth - depth // 2) + "]" * (depth // 2)


def bomb(width: int, levels: int, mappings: bool) -> tuple[str, str, int]:
    """Anchor definitions (as top-level keys), the alias to use, and how many values that
    alias stands for once expanded."""
    lines, size = [], 1 + width
    lines.append(f"x-0: &a0 [{', '.join(['lol'] * width)}]")
    for level in range(1, levels):
        if mappings:
            items = ", ".join(f"k{i}: *a{level - 1}" for i in range(width))
            lines.append(f"x-{level}: &a{level} {{{items}}}")
            size = 1 + width * (1 + size)
        else:
            lines.append(f"x-{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
            size = 1 + width * size
    return "\n".join(lines) + "\n", f"*a{levels - 1}", size


def _lines_for(err: str, source: Path) -> list[str]:
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert lines and all(line.startswith(f"{source}: ") for line in lines), err
    return lines


def _names(lines: list[str], source: Path, path: tuple) -> bool:
    return any(line.startswith(f"{source}: {format_path(path)}: ") for line in lines)


def _finite_everywhere(doc) -> bool:
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, float) and not math.isfinite(value):
            return False
        elif isinstance(value, str) and value.lower() in ("inf", "-inf", "+inf", "nan", "infinity"):
            return False
    return True


hazards = st.one_of(
    st.tuples(st.just("deep"), st.sampled_from(FIELDS), st.integers(1, 1200),
              st.sampled_from(["flow-list", "flow-map", "mixed"])),
    st.tuples(st.just("bomb"), st.sampled_from(FIELDS), st.integers(2, 12), st.integers(1, 12), st.booleans()),
    st.tuples(st.just("non-finite"), st.sampled_from(FIELDS), st.sampled_from(sorted(NON_FINITE))),
    st.tuples(st.just("big-integer"), st.sampled_from(FIELDS), st.sampled_from(BIG_INTEGERS)),
    st.tuples(st.just("odd-number"), st.sampled_from(FIELDS), st.sampled_from(ODD_NUMBERS)),
    st.tuples(st.just("unicode-space"), st.sampled_from(sorted(PATTERNED, key=str)), st.sampled_from(UNICODE_SPACES),
              st.integers(0, 30), st.booleans()),
)


@settings(FAST, max_examples=300)
@given(hazard=hazards)
def test_hostile_yaml_is_refused_in_one_line(hazard, tmp_path_factory):
    kind, path = hazard[0], hazard[1]
    source = tmp_path_factory.mktemp("hostile") / "cluster.yaml"
    out = source.parent / "out" / "workflow.yaml"
    prefix = ""
    if kind == "deep":
        text = with_hazard(path, nested(hazard[2], hazard[3]))
    elif kind == "bomb":
        prefix, alias, size = bomb(*hazard[2:])
        text = with_hazard(path, alias, prefix)
    elif kind == "unicode-space":
        value, space, at, raw = PATTERNED[path], hazard[2], hazard[3], hazard[4]
        value = value[: at % (len(value) + 1)] + space + value[at % (len(value) + 1):]
        raw = (raw and space in RAW_SAFE_SPACES and not value[0].isspace() and not value[-1].isspace()
               and value[0] != "\ufeff")
        text = with_hazard(path,
                           value if raw else yaml.safe_dump(value,
                                                            allow_unicode=True).removesuffix("\n...\n").rstrip("\n"))
    else:
        text = with_hazard(path, hazard[2])
    source.write_text(text, encoding="utf-8")
    status, _, err = run_main([str(source), "-o", str(out), "-q"])
    event(f"{kind}: exit {status}")
    if status == 0:
        assert out.is_file()
        doc = yaml.safe_load(out.read_text(encoding="utf-8"))
        validate_argo(doc)
        assert _finite_everywhere(doc), "a number that is not finite was rendered"
        assert kind not in ("deep", "non-finite", "big-integer", "unicode-space"), f"{kind} was rendered"
        return
    assert status == 2 and not out.parent.exists(), err
    lines = _lines_for(err, source)
    if kind == "deep":
        depth = len(path) + hazard[2]  # the root mapping and each container on the way, then the value's levels
        limited = f"{source}: (top level): lists and mappings are nested more than {DOCUMENTED_DEPTH} levels deep"
        if depth > DOCUMENTED_DEPTH:
            assert len(lines) == 1 and lines[0].startswith(limited), err
        else:
            assert not any(line.startswith(limited) for line in lines) and _names(lines, source, path), err
    elif kind == "bomb":
        aliasing = [line for line in lines if "aliases" in line]
        if hazard[2] ** hazard[3] > 2 * DOCUMENTED_ALIAS_VALUES:
            assert len(lines) == 1 and aliasing and lines[0].startswith(f"{source}: (top level): aliases "), err
        elif size < 1_000:  # well under go-yaml's 99% rule too, whatever the anchors around it
            assert not aliasing, err
    elif kind == "non-finite":
        assert lines == [f"{source}: {format_path(path)}: {NON_FINITE[hazard[2]]} is not a finite number, which JSON, "
                         "Helm and Kubernetes cannot carry; give a finite number, or quote it for the string"], err
    elif kind in ("big-integer", "unicode-space"):
        assert _names(lines, source, path), err


# --- whatever -o names -------------------------------------------------------------------

REFUSED = {"the values file", "./ + the values file", "a symlink to the values file", "a hard link to the values file",
           "a folder", "a folder/", "a new name/", "a new name/.", "..", "", "a FIFO nothing reads",
           "a symlink to a FIFO nothing reads", "a file as a folder/x.yaml", "a symlink loop"}
TARGETS = ["the values file", "./ + the values file", "a symlink to the values file", "a hard link to the values file",
           "a character device", "a new file", "a new file in new folders", "an existing file",
           "a symlink to an existing file",
           "a dangling symlink", "a folder", "a folder/", "a new name/", "a new name/.", "..", "",
           "a FIFO nothing reads",
           "a symlink to a FIFO nothing reads", "a file as a folder/x.yaml", "a symlink loop"]


def _null_device(root: Path) -> str:
    """A private /dev/null where we may create one (root: mknod), else the real one, so a
    regression that replaces its target by a file cannot take the system's /dev/null with it."""
    if os.geteuid() != 0:
        return os.devnull
    os.mknod(root / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return str(root / "null")


def _make_target(kind: str, root: Path, values: Path, mode: int) -> str:
    existing = root / "existing.yaml"
    if kind in ("an existing file", "a symlink to an existing file"):
        existing.write_text("old\n")
        existing.chmod(mode)
    return {
        "the values file": lambda: str(values),
        "./ + the values file": lambda: os.path.join(str(values.parent), ".", "..", values.parent.name, values.name),
        "a symlink to the values file": lambda: (root / "link.yaml").symlink_to(values) or str(root / "link.yaml"),
        "a hard link to the values file": lambda: os.link(values, root / "hard.yaml") or str(root / "hard.yaml"),
        "a character device": lambda: _null_device(root),
        "a new file": lambda: str(root / "new.yaml"),
        "a new file in new folders": lambda: str(root / "a" / "b" / "new.yaml"),
        "an existing file": lambda: str(existing),
        "a symlink to an existing file": lambda: (root / "link.yaml").symlink_to(existing) or str(root / "link.yaml"),
        "a dangling symlink": lambda: (root / "link.yaml").symlink_to(root / "gone" / "x.yaml")
        or str(root / "link.yaml"),
        "a folder": lambda: (root / "dir").mkdir() or str(root / "dir"),
        "a folder/": lambda: (root / "dir").mkdir() or str(root / "dir") + "/",
        "a new name/": lambda: str(root / "new") + "/",
        "a new name/.": lambda: str(root / "new") + "/.",
        "..": lambda: str(root / ".."),
        "": lambda: "",
        "a FIFO nothing reads": lambda: os.mkfifo(root / "fifo") or str(root / "fifo"),
        "a symlink to a FIFO nothing reads": lambda: (os.mkfifo(root / "fifo"),
                                                      (root / "link").symlink_to(root / "fifo"))
        and str(root / "link"),
        "a file as a folder/x.yaml": lambda: (root / "file").write_text("x") and str(root / "file" / "x.yaml"),
        "a symlink loop": lambda: ((root / "l1").symlink_to(root / "l2"),
                                   (root / "l2").symlink_to(root / "l1")) and str(root / "l1"),
    }[kind]()


@settings(FAST, max_examples=120)
@given(kind=st.sampled_from(TARGETS), mode=st.sampled_from([0o600, 0o640, 0o644, 0o664, 0o755]))
def test_output_path_tricks(kind, mode):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        values = root / "values" / "cluster.yaml"
        values.parent.mkdir()
        values.write_text(yaml.safe_dump(BASE), encoding="utf-8")
        before = values.read_bytes()
        target = _make_target(kind, root, values, mode)
        links = {p: os.readlink(p) for p in root.rglob("*") if p.is_symlink()}
        status, stdout, err = run_main([str(values), "-o", target, "-q"])
        event(f"{kind}: exit {status}")
        assert status == (1 if kind in REFUSED else 0), err
        assert values.read_bytes() == before and not values.is_symlink(), "the values file changed"
        assert {p: os.readlink(p) for p in links} == links, "a symbolic link was replaced"
        assert not [p for p in root.rglob(".*.tmp")], "a temporary file was left behind"
        assert stdout == ""
        if status == 1:
            assert err.startswith(f"render.py: cannot write {target or repr(target)}: ") and err.count("\n") == 1, err
            return
        assert err == "", err
        written = Path(os.path.realpath(target))
        if kind == "a character device":
            assert stat.S_ISCHR(written.stat().st_mode), "the device was replaced by a regular file"
        else:
            assert written.read_text(encoding="utf-8") == pipeline.run(values).text
            if kind in ("an existing file", "a symlink to an existing file"):
                assert stat.S_IMODE(written.stat().st_mode) == mode, "an existing file's mode changed"
