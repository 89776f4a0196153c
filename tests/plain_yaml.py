"""YAML dumpers that write strings plain (unquoted), as people write values files, for the
tests that check render.py and Helm read such files alike (tests/chart/test_chart_parity.py,
tests/values/test_helm_reading.py)."""

from __future__ import annotations

import yaml

from torchdag.yamlread import load_documents


class PlainDumper(yaml.SafeDumper):
    """Every string plain wherever YAML's syntax allows it (`yes`, `1e3`, `2024-01-31`, `010`
    unquoted too), keys included: what the file then means is up to each reader."""

    def emit(self, event):
        if isinstance(event, yaml.ScalarEvent) and event.tag == "tag:yaml.org,2002:str" and event.style is None:
            event.implicit = (True, True)  # "reads back as a string": the emitter then writes it plain if it can
        super().emit(event)


class MixedDumper(PlainDumper):
    """Strings plain where render.py reads them back as themselves (`1:30`, `<<`, `0x_g`), as
    Helm must; the others (`y`, `1e3`) double-quoted, so the file stays what was drawn."""


def _plain_or_quoted(dumper: MixedDumper, data: str) -> yaml.ScalarNode:
    try:
        plain = bool(data) and "\n" not in data and load_documents(f"- {data}\n") == [[data]]
    except Exception:  # noqa: BLE001 - not a word that reads back plain: quote it
        plain = False
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=None if plain else '"')


MixedDumper.add_representer(str, _plain_or_quoted)
