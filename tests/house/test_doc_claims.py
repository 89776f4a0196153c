"""The sentences of the docs that state a number, a count, a file or a default are held here
against the code or what render.py prints, so that the next change that moves one fails
until the doc says so too. Each check reads the claim from the doc (what the doc marks, the
number it states) and measures the thing itself; none copies a number from the doc.

- byo.md: "the N lines marked `# torchdag` in A and B" (each file's marked lines counted),
  the render header it shows (the default values file's), what must be in the image, and the
  helpers' ConfigMap table (files and kB added, measured with render.py), its per-node mount
  and the 128 KiB bound;
- values.md: every table row's default, and the restarts the default backoff fits in a day;
- every doc: "`key: value` (the default)" and "`key` (default N)";
- failures.md: the signature table is signatures.yaml's causes and fixes.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from helpers import REPO
from torchdag import catalog, pipeline
from torchdag.diagnose import signatures
from torchdag.errors import ValuesError
from torchdag.render import json_size

DOCS = REPO / "docs"
DEFAULT_VALUES = REPO / "examples" / "cluster.yaml"  # the README's values file: a two-node job
SCHEMA = json.loads((REPO / "schema" / "values.schema.json").read_text(encoding="utf-8"))
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10}


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def number(word: str) -> int:
    return NUMBERS[word.lower()] if word.lower() in NUMBERS else int(word.replace(",", ""))


@lru_cache(maxsize=None)
def rendered(overrides: str = "") -> pipeline.Rendered:
    """The default values file, with the overrides merged over it (as a second -f file)."""
    import tempfile

    if not overrides:
        return pipeline.run(DEFAULT_VALUES)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(overrides)
    try:
        return pipeline.run([DEFAULT_VALUES, f.name])
    finally:
        Path(f.name).unlink()


def workflow_node(text: str) -> yaml.Node:
    return next(n for n in yaml.compose_all(text) if n is not None and any(
        k.value == "kind" and v.value in ("Workflow", "WorkflowTemplate") for k, v in n.value))


def configmap_files(text: str) -> list[str]:
    wf = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") in ("Workflow", "WorkflowTemplate"))
    agents = catalog.catalog()["agents"]
    manifests = [yaml.safe_load(t["resource"]["manifest"]) for t in wf["spec"]["templates"]
                 if t.get("name") == agents["task"] and "resource" in t]
    return sorted(manifests[0]["data"]) if manifests else []


# -- byo.md -----------------------------------------------------------------------------

def marked_lines(path: Path) -> int:
    """Lines of code that end in a `# torchdag` comment (a comment line alone is not one)."""
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines()
               if re.match(r"\s*[^#\s].*#\s*torchdag\b", line))


def line_count_claims(text: str) -> list[tuple[str, int, list[Path]]]:
    """Each claim of N marked lines, and the files it says mark them: a section titled "The N
    lines" (its paragraphs that say "marked `# torchdag`" link the files, and its python block
    numbers them `# 1:` ... `# N:`), or a sentence "the N lines ... marked `# torchdag` in [A]"."""
    out = []
    for section in re.split(r"^## ", text, flags=re.M):
        title = re.match(r"The (\w+) lines\b", section)
        paragraphs = re.split(r"\n\s*\n", section)
        for paragraph in paragraphs:
            found = re.search(r"\b(\w+) lines\b[^.]*?marked `# torchdag`", paragraph)
            said = found.group(1) if found and found.group(1).lower() in NUMBERS else title and title.group(1)
            if said and "marked `# torchdag`" in paragraph:
                links = [(DOCS / target).resolve() for target in re.findall(r"\]\(([^)#]+\.py)\)", paragraph)]
                out.append(((found or title).group(0), number(said), links))
        if title:
            block = re.search(r"```python\n(.*?)```", section, re.S)
            numbered = re.findall(r"#\s*(\d+):", block.group(1)) if block else []
            out.append((f"{title.group(0)}: its python block", number(title.group(1)), []))
            if len(numbered) != number(title.group(1)):
                out.append((f"{title.group(0)}: its python block numbers {len(numbered)}", number(title.group(1)),
                            [None]))
    return out


def marked(path: Path | None) -> int:
    return -1 if path is None else marked_lines(path)


def test_the_lines_byo_md_counts_are_the_lines_its_scripts_mark():
    claims = line_count_claims(doc("byo.md"))
    assert claims, "byo.md no longer counts its lines: hold the new claim here"
    wrong = [(said, claimed, str(path.relative_to(REPO)) if path else "", marked(path))
             for said, claimed, paths in claims for path in paths if marked(path) != claimed]
    assert wrong == [], "byo.md counts lines its scripts do not mark that many times (claim, file, marked)"


def test_the_line_count_check_counts_what_is_marked(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("# a comment that says `# torchdag`\nimport torchdag_ddp  # torchdag\nx = 1\n"
                      "setup()  # torchdag: why\n")
    assert marked_lines(script) == 2
    text = f"needs these five lines, each marked `# torchdag` in [s]({script})\n"
    assert [(n, len(p)) for _, n, p in line_count_claims(text)] == [(5, 1)]
    text = f"## The two lines\n\nthese, each marked `# torchdag` in [s]({script})\n\n```python\na  # 1: x\n```\n"
    claims = line_count_claims(text)
    assert [(n, [marked(p) for p in paths]) for _, n, paths in claims] == [(2, [2]), (2, []), (2, [-1])]


def header_block(text: str) -> list[str]:
    """The render header byo.md shows: its ```text block of `# ` lines."""
    block = re.search(r"render header[^`]*```text\n(.*?)```", text, re.S)
    assert block, "byo.md shows no render header block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_render_header_byo_md_shows_is_the_default_jobs():
    """Its lines (the script's duties, the helpers' ConfigMap and its file count) are what
    render.py prints for the default values file, which the doc names."""
    text = doc("byo.md")
    header = [line for line in rendered().text.splitlines() if line.startswith("# ")]
    assert [line for line in header_block(text) if line not in header] == [], "\n".join(header)
    assert "examples/cluster.yaml" in text.split("```text")[0].rstrip().rsplit("\n\n", 1)[-1]


def image_files(text: str) -> list[str]:
    """What the helpers the default job's containers run need from the image: those it runs
    from the agents folder that the ConfigMap does not carry."""
    path = catalog.catalog()["agents"]["path"]
    wf = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "Workflow")
    run = {word.rsplit("/", 1)[1] for t in wf["spec"]["templates"] for c in [t.get("container") or {}]
           for word in (c.get("command") or []) + (c.get("args") or []) if isinstance(word, str)
           and word.startswith(path + "/")}
    return sorted(run - set(configmap_files(text)))


def test_what_byo_md_says_the_image_must_hold_is_what_the_default_job_runs_from_it():
    said = re.search(r"Nothing\s+of\s+torchdag\s+has\s+to\s+be\s+in\s+the\s+image(?:\s+but\s+([^:]*))?[:.]",
                     doc("byo.md"))
    assert said, "byo.md no longer says what of torchdag the image needs: hold the new sentence here"
    named = sorted(re.findall(r"([\w-]+\.py)", said.group(1) or ""))
    assert named == image_files(rendered().text)


TABLE_VARIANTS = ("", "preflight: {enabled: true}\n", "preflight: {enabled: true}\nscheduling: {gang: volcano}\n")


def carried(overrides: str) -> tuple[int, float, yaml.Node]:
    """(files, kB the ConfigMap adds to the Workflow's JSON, the Workflow) for a variant."""
    with_agents = rendered(overrides)
    without = rendered(overrides + "agents: {fromWorkflow: false}\n")
    added = json_size(workflow_node(with_agents.text)) - json_size(workflow_node(without.text))
    return len(configmap_files(with_agents.text)), added / 1000, workflow_node(with_agents.text)


def test_byo_md_s_configmap_table_is_measured():
    text = doc("byo.md")
    rows = re.findall(r"^\| ([^|]+) \| (\d+) \| ([\d.]+) \|$", text.split("What the ConfigMap adds")[1], re.M)
    assert len(rows) == len(TABLE_VARIANTS), rows
    measured = [carried(v)[:2] for v in TABLE_VARIANTS]
    assert [(int(files), float(kb)) for _, files, kb in rows] == [(files, round(kb, 1)) for files, kb in measured]
    # "Each node template adds one N-byte volume mount"
    mount = int(re.search(r"adds one (\d+)-byte volume mount", text).group(1))
    plan = rendered().plan
    assert mount == len(json.dumps(plan.agents["mount"], separators=(",", ":"))) + 1  # and its comma
    # "below Linux's 128 KiB limit on one environment string": the largest ConfigMap's template
    assert "128 KiB limit on one environment string" in text
    wf = next(d for d in yaml.safe_load_all(rendered(TABLE_VARIANTS[-1]).text) if d and d.get("kind") == "Workflow")
    task = next(t for t in wf["spec"]["templates"] if t["name"] == catalog.catalog()["agents"]["task"])
    assert len(json.dumps(task, separators=(",", ":")).encode()) < 128 * 1024


# -- defaults ---------------------------------------------------------------------------

def _resolve(node: dict) -> dict:
    while "$ref" in node:
        target = SCHEMA
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def schema_node(path: str) -> dict | None:
    node = SCHEMA
    for part in path.split("."):
        name, items = part.removesuffix("[]"), part.endswith("[]")
        node = _resolve(node)
        if name not in (node.get("properties") or {}):
            return None
        node = node["properties"][name]
        if items:
            node = _resolve(node)["items"]
    return node


def schema_paths(node: dict = SCHEMA, prefix: str = "") -> list[str]:
    out = []
    for name, child in (_resolve(node).get("properties") or {}).items():
        path = f"{prefix}{name}"
        out.append(path)
        child = _resolve(child)
        if child.get("type") == "object" and child.get("properties"):
            out += schema_paths(child, path + ".")
    return out


def default_of(path: str):
    """The schema's default of a values path, or of the one path that ends with it."""
    node = schema_node(path)
    if node is None:
        ends = [p for p in schema_paths() if p.endswith("." + path)]
        node = schema_node(ends[0]) if len(ends) == 1 else None
    if node is None:
        return KeyError
    return node["default"] if "default" in node else _resolve(node).get("default", KeyError)


def as_value(text: str):
    text = text.strip().strip("`").removesuffix(" s").strip()
    try:
        return json.loads(text)
    except ValueError:
        return yaml.safe_load(text)


def test_every_default_values_md_states_is_the_schemas():
    rows = re.findall(r"^\| `([\w.\[\]]+)` \| `([^`]*)` \|", doc("values.md"), re.M)
    assert len(rows) > 50
    wrong = [(path, said, default_of(path)) for path, said in rows if as_value(said) != default_of(path)]
    assert wrong == []


def default_claims() -> list[tuple[str, str, str]]:
    """(doc, values path, the value it says is the default) for "`path: value` (the default)"
    and "`path` ... (default value)" in every doc and README, where path is a values field."""
    out = []
    for path in [REPO / "README.md", REPO / "chart" / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for key, value in re.findall(r"`([\w.]+): ([^`]+)`(?: \(|, )the default[),;.]", text):
            out.append((path.name, key, value))
        for key, value in re.findall(r"`([\w.]+)`[^`()\n]{0,20} \(default (`[^`]+`|[\w.]+(?: s)?)\)", text):
            out.append((path.name, key, value))
    return [(name, key, value) for name, key, value in out if default_of(key) is not KeyError]


def test_every_default_the_docs_state_is_the_schemas():
    claims = default_claims()
    assert {key for _, key, _ in claims} >= {"recovery", "scheduling.timeout", "ascend.mountDriver",
                                             "agents.fromWorkflow", "timeouts.hcclConnect", "ascend.deviceGroup"}
    assert [(name, key, said, default_of(key)) for name, key, said in claims
            if as_value(said) != default_of(key)] == []


def test_the_restarts_the_default_backoff_fits_in_the_default_deadline():
    """values.md: "(30 s doubling: N restarts fit in D s, N+1 do not)" and the cap."""
    text = doc("values.md")
    said = re.search(r"\((\d+) s doubling: (\d+) restarts fit in (\d+) s, (\d+) do not\)", text)
    backoff, fit, deadline, too_many = (int(g) for g in said.groups())
    assert (backoff, deadline) == (default_of("failurePolicy.backoffSeconds"), default_of("timeouts.workflowDeadline"))
    assert too_many == fit + 1
    rendered(f"failurePolicy: {{maxRestarts: {fit}}}\n")
    with pytest.raises(ValuesError):
        rendered(f"failurePolicy: {{maxRestarts: {too_many}}}\n")
    cap = re.search(r"no wait over (\d+) s \(the catalogue's `(\w+)`\)", text)
    assert int(cap.group(1)) == catalog.catalog()[cap.group(2)]


# -- failures.md ------------------------------------------------------------------------

def test_the_signature_table_is_signatures_yaml():
    """Each row's cause and fix as diagnose prints them, a group shown as …."""
    def shown(text: str) -> str:
        return re.sub(r"\{\d+\}", "…", re.sub(r"\(\{\d+\}\{\d+\}\)", "(……)", text))

    rows = {m[0]: (m[1], m[2]) for m in re.findall(r"^\| `([\w-]+)` \| [^|]+ \| [^|]+ \| ([^|]+) \| ([^|]+) \|$",
                                                   doc("failures.md"), re.M)}
    expected = {s.id: (shown(s.cause), shown(s.fix)) for s in signatures.load()}
    assert {k: v for k, v in rows.items() if k in expected} == expected
