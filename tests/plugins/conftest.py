"""Make plugins/filter and plugins/module_utils importable as plain modules."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for sub in ("plugins/filter", "plugins/module_utils"):
    path = str(ROOT / sub)
    if path not in sys.path:
        sys.path.insert(0, path)
