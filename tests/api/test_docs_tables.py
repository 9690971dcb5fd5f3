"""The docs' `kubectl get tpujobs` tables are what kubectl prints from the CRD: the same columns
(NAME, then the printer columns; `-o wide` adds the priority-1 ones) and each figure in the
form the operator writes it (GOODPUT 92.1%, MFU a percent or -, nothing in e-notation)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpujob.api.crd import build_printer_columns

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FORMS = {
    "GOODPUT": re.compile(r"(\d{1,3}\.\d%|-)?"),
    "MFU": re.compile(r"(\d+(\.\d+)?%|-)?"),
    "TFLOP/S/DEV": re.compile(r"(\d+(\.\d+)?)?"),
    "LOSS": re.compile(r"(\d+(\.\d+)?)?"),
    "TOK/S/DEV": re.compile(r"\d*"),
}


# A header's column: words one space apart (LAST STEP); kubectl puts 3 or more between columns.
COLUMN = re.compile(r"\S+(?: \S+)*")


def _headers(wide: bool) -> list[str]:
    return ["NAME"] + [c["name"].upper() for c in build_printer_columns()
                       if wide or not c.get("priority")]


def _tables() -> list[tuple[str, list[str]]]:
    """(where, lines) of every table whose header starts `NAME SLICE`: the header and its rows,
    up to the end of the code block or the next command."""
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.split()[:2] != ["NAME", "SLICE"]:
                continue
            rows = [line]
            for row in lines[i + 1:]:
                if row.startswith(("```", "$", "^C")) or not row.strip():
                    break
                rows.append(row)
            found.append((f"{path.relative_to(REPO)}:{i + 1}", rows))
    return found


def _cells(header: str, row: str) -> dict[str, str]:
    """A row's cells by column, cut where kubectl aligns each column's header."""
    found = list(re.finditer(COLUMN, header))
    starts = [m.start() for m in found]
    names = [m.group() for m in found]
    ends = starts[1:] + [None]
    return {n: row[s:e].strip() for n, s, e in zip(names, starts, ends, strict=True)}


TABLES = _tables()


def test_the_docs_show_the_table():
    assert len(TABLES) >= 4, [where for where, _ in TABLES]


@pytest.mark.parametrize("where, rows", TABLES, ids=[where for where, _ in TABLES])
def test_a_docs_table_has_the_crds_columns_and_printed_forms(where, rows):
    header = [m.group() for m in re.finditer(COLUMN, rows[0])]
    assert header in (_headers(wide=False), _headers(wide=True)), where
    for row in rows[1:]:
        if row.startswith("..."):
            continue  # an elision
        cells = _cells(rows[0], row)
        for column, form in FORMS.items():
            if column in cells:
                assert form.fullmatch(cells[column]), (where, column, cells[column], row)
        assert not [c for c in cells.values() if re.fullmatch(r"[-+]?[\d.]+[eE][-+]?\d+", c)], (
            where, row)
