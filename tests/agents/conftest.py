"""The fake Kubernetes API the gang-watch tests here share (gangwatch_helpers.py, beside them)."""

from gangwatch_helpers import api  # noqa: F401 (a fixture, for every test in this folder)
