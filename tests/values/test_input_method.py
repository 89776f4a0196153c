"""The values mistakes of a Chinese input method: full-width punctuation where YAML needs
ASCII (named with its character and its line and column, not the parser's message about the
next line), a GBK file (named by its line), and what renders but will not run as meant: an
args item holding an option and its value, a relative script (warnings, in render.py and in
the chart's NOTES alike, that do not stop the render)."""

from __future__ import annotations

import pytest
from chart_notes import helm_notes

from cli_helpers import BASE, render_py, write

COLON = "'：' is a full-width colon (U+FF1A, as a Chinese input method types it) where YAML needs ':'; retype it " \
        "as ':' followed by a space"
COMMA = "'，' is a full-width comma (U+FF0C, as a Chinese input method types it) where YAML needs ','; retype it " \
        "as ',' followed by a space"


def refused(tmp_path, text: str) -> list[str]:
    values = write(tmp_path, text)
    done = render_py(str(values))
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    return [line.removeprefix(f"{values}: (top level): ") for line in done.stderr.splitlines()]


def at(text: str, char: str) -> list[str]:
    """Where each `char` is, as `line L, column C` (1-based, as an editor counts)."""
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        out += [f"line {number}, column {column + 1}" for column, c in enumerate(line) if c == char]
    return out


FLOW_NODE = BASE.replace("  - name: 192.168.110.22\n    nic: enp11s0f0\n    accelerator: ascend310p\n    devices: 1\n"
                         "    master: true", "  - {name: 192.168.110.22, nic： enp11s0f0, accelerator: ascend310p, "
                         "devices: 1, master: true}")


@pytest.mark.parametrize("typed, char, message", [
    # the parser would name the next line's "could not find expected ':'"
    (BASE.replace("port: 25195", "port： 25195"), "：", COLON),
    # in a flow list: YAML itself fails after the quoted item
    (BASE.replace('args: ["--type", "example"]', 'args: ["--type"， "example"]'), "，", COMMA),
    # YAML that parses, though not as meant: a key "nic： enp11s0f0", one item "--type，example"
    (FLOW_NODE, "：", COLON),
    (BASE.replace('args: ["--type", "example"]', "args: [--type，example]"), "，", COMMA),
    # several at once, in line order
    (BASE.replace("port: 25195", "port： 25195").replace("accelerator: ascend310p", "accelerator： ascend310p"),
     "：", COLON),
    ("name: x\nimage: i\nscript: /a.py\nnodes:\n\u3000- {name: a}\n", "\u3000",
     "'\u3000' is an ideographic space (U+3000, as a Chinese input method types it) where YAML needs ' ' (a space); "
     "retype it as ' ' (a space)"),
    ("name: x\nimage: i\nscript: \u201c/code/train.py\nnodes: [{name: a}]\n", "\u201c",
     "'\u201c' is a left double quotation mark (U+201C, as a Chinese input method types it) where YAML needs '\"'; "
     "retype it as '\"'"),
])
def test_full_width_punctuation_is_named_with_its_line_and_column(tmp_path, typed, char, message):
    places = at(typed, char)
    assert places and FLOW_NODE != BASE
    assert refused(tmp_path, typed) == [f"{place}: {message}" for place in places]


def test_chinese_text_in_comments_quotes_and_values_stays(tmp_path):
    text = BASE + '# 注释：端口，不要改\nannotations: {"example.com/note": "第一版，端口：25195"}\n'
    text = text.replace("name: bladetrain", "name: bladetrain  # 任务：训练")
    done = render_py(str(write(tmp_path, text)), "--check")
    assert done.returncode == 0, done.stderr


def test_a_gbk_file_is_named_by_its_line(tmp_path):
    values = tmp_path / "cluster.yaml"
    values.write_bytes(BASE.replace("port: 25195", "# 端口\nport: 25195").encode("gbk"))
    done = render_py(str(values))
    line = BASE.split("port: 25195")[0].count("\n") + 1
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"{values}: (top level): line {line}, column 3: not UTF-8 text (byte 0xb6: invalid start "
                           f"byte): it reads as GBK (a Chinese Windows editor's encoding), where line {line} is "
                           "'# 端口'; save it as UTF-8 (iconv -f GBK -t UTF-8)\n")


ARGS_WARNING = ('args[0]: "--type example" holds a space, so the script gets it as one word (argparse looks for an '
                'option of that name); give each word its own item: ["--type","example"]')
SCRIPT_WARNING = ('script: "rl/BladeTrain.py" is a relative path, which the launcher looks up in the image\'s '
                  'working directory (workingDir is empty); give the script\'s absolute path in the image, or set '
                  'workingDir')
TYPED = BASE.replace('args: ["--type", "example"]', 'args: ["--type example", "--name=a b", "--lr", "0.1"]') \
    .replace("script: /code/rl/BladeTrain.py", "script: rl/BladeTrain.py")


def test_an_option_and_its_value_in_one_item_and_a_relative_script_are_warned_of(tmp_path):
    values = write(tmp_path, TYPED)
    done = render_py(str(values), "-o", str(tmp_path / "wf.yaml"))
    assert done.returncode == 0 and (tmp_path / "wf.yaml").exists(), done.stderr
    assert done.stderr.splitlines() == [f"warning: {values}: {ARGS_WARNING}", f"warning: {values}: {SCRIPT_WARNING}"]
    # a relative script under a workingDir is where the user put it; an absolute one needs none
    for fixed in (TYPED + "workingDir: /code\n", TYPED.replace("script: rl/", "script: /code/rl/")):
        done = render_py(str(write(tmp_path, fixed, name="fixed.yaml")), "--check")
        assert done.returncode == 0 and "script:" not in done.stderr, done.stderr


def test_the_chart_warns_the_same(helm, tmp_path):
    notes = helm_notes(helm, write(tmp_path, TYPED))
    assert f"WARNING: {ARGS_WARNING}\n" in notes and f"WARNING: {SCRIPT_WARNING}\n" in notes, notes
