"""What a Chinese input method types for YAML's punctuation: full-width colons, commas,
quotes and brackets where YAML needs ASCII, found with their line and column so that one
line can name each (values.py for a file YAML cannot read, validate.py for a key)."""

from __future__ import annotations

from .catalog import catalog

_SEPARATORS = "\uff0c\u3001\uff1b"  # comma, ideographic comma, semicolon
_OPENERS = "\u201c\u2018\uff3b\uff5b"  # quotes and brackets that open a value
_CLOSERS = "\u201d\u2019\uff3d\uff5d"


def full_width_characters() -> dict:
    """catalog.yaml `fullWidth.characters`: each one, the ASCII one YAML needs, its name and code."""
    return catalog()["fullWidth"]["characters"]


def _ascii_before(line: str, column: int) -> bool:
    """An ASCII character (not a space) just before `column`, spaces skipped: what a key or a
    word of a value written in ASCII leaves there, where Chinese text leaves a Chinese one."""
    before = line[:column].rstrip(" ")
    return bool(before) and "!" <= before[-1] <= "~"


def full_width_marks(text: str) -> list[tuple[int, int, str]]:
    """(line, column, character), 1-based, of full-width punctuation standing where YAML needs
    its ASCII form: a colon after an ASCII key, a comma or semicolon inside a flow list or
    mapping or after an ASCII word, an ideographic space in the indentation or after `:` or
    `-`, a full-width
    quote or bracket opening or closing a value. Chinese text in a quoted value, a comment,
    or a plain value after a Chinese character is left alone."""
    known = full_width_characters()
    if not any(char in text for char in known):
        return []
    marks: list[tuple[int, int, str]] = []
    depth = 0  # flow collections open ([ {), across lines
    quote = ""  # the quote a scalar is open in, across lines
    for number, line in enumerate(text.split("\n"), 1):
        indent = len(line) - len(line.lstrip(" \u3000"))
        for column, char in enumerate(line):
            if quote:
                if char == quote and not (quote == '"' and line[column - 1:column] == "\\"):
                    quote = ""
                continue
            if char in "\"'" and (column == 0 or line[column - 1] in " \t[{,:-"):
                quote = char
            elif char == "#" and (column == 0 or line[column - 1] in " \t"):
                break  # a comment
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth = max(depth - 1, 0)
            elif char in known and (
                    (char == "\uff1a" and _ascii_before(line, column))
                    or (char in _SEPARATORS and (depth > 0 or _ascii_before(line, column)))
                    or (char == "\u3000" and (column < indent or line[:column].endswith((":", "-"))))
                    or (char in _OPENERS and (column == indent or line[:column].rstrip(" ").endswith(
                        (":", "-", "[", "{", ","))))
                    or (char in _CLOSERS and _ascii_before(line, column)  # not a value's first character
                        and not line[:column].rstrip(" ").endswith((":", "[", "{", ","))
                        and line[:column].strip(" ") != "-")
                    or (char == "\uff03" and column == indent)):
                marks.append((number, column + 1, char))
    return marks


def full_width_fields(char: str) -> dict:
    """The fields of the messages key-full-width and yaml-full-width for one character."""
    entry = full_width_characters()[char]
    shown = "' ' (a space)" if entry["ascii"] == " " else f"'{entry['ascii']}'"
    return {"char": char, "name": entry["name"], "code": entry["code"], "shown": shown,
            "after": " followed by a space" if entry["ascii"] in ":," else ""}
