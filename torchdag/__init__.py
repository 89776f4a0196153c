"""torchdag: render multi-node torchrun training jobs as Argo Workflows."""

from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
# The checkout this package runs from (schema/, templates/ next to torchdag/).
# For an installed wheel this is site-packages, which holds neither: see DATA_DIR.
REPO_ROOT = PACKAGE_DIR.parent
# An installed wheel carries the schema and the template under torchdag/_data/ (pyproject.toml
# force-includes them); a checkout, or an editable install, reads them where they are edited.
_PACKAGED_DATA = PACKAGE_DIR / "_data"
DATA_DIR = _PACKAGED_DATA if (_PACKAGED_DATA / "schema").is_dir() else REPO_ROOT
SCHEMA_PATH = DATA_DIR / "schema" / "values.schema.json"
TEMPLATES_DIR = DATA_DIR / "templates"
AGENTS_DIR = PACKAGE_DIR / "agents"  # the helpers the Workflow carries: the runtime, in the package itself
