"""torchdag: render multi-node torchrun training jobs as Argo Workflows."""

from pathlib import Path

__version__ = "0.1.0"

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = REPO_ROOT / "schema" / "values.schema.json"
TEMPLATES_DIR = REPO_ROOT / "templates"
