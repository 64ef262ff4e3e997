"""`make help` and the README's table of targets say the same (issue 28.10): every target with a
`##` line is in the table and the table names no other; `make help` aligns every description in one
column, however long the target's name."""
from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _help_lines() -> list[str]:
    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("  ")]


def _readme_targets() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("| target | what it does |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z][a-z0-9-]*)`", row.split(" | ", 1)[0])}


def test_the_readme_table_names_every_target_of_make_help_and_no_other():
    targets = {line.split()[0] for line in _help_lines()}
    assert len(targets) > 20
    readme = _readme_targets()
    assert targets - readme == set(), "make help targets missing from README's table"
    assert readme - targets == set(), "README's table names targets make help does not list"


def test_make_help_aligns_its_descriptions():
    lines = _help_lines()
    columns = {re.match(r"  \S+\s+", line).end() for line in lines}
    assert len(columns) == 1, [line[:40] for line in lines]
