"""Regenerate the README's result tables from ``benchmarks/results/<NAME>.md``.

The README marks each table with ``<!-- results:NAME -->`` ... ``<!-- /results:NAME -->``;
everything between the markers is replaced by the results file's text -- or, when the
file marks a part with ``<!-- summary -->`` ... ``<!-- /summary -->``, by that part only
(for results files that hold more detail than the README should). Markers without a
results file are left alone (and reported).

    python benchmarks/update_readme.py [README.md]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"(<!-- results:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)
_SUMMARY = re.compile(r"<!-- summary -->\n(.*?)<!-- /summary -->", re.S)


def render(text: str, results: Path = RESULTS) -> tuple[str, list[str], list[str]]:
    """``text`` with every marked block refreshed; also the names updated and missing."""
    updated, missing = [], []

    def fill(m: re.Match) -> str:
        source = results / f"{m['name']}.md"
        if not source.exists():
            missing.append(m["name"])
            return m.group(0)
        updated.append(m["name"])
        body = source.read_text()
        summary = _SUMMARY.search(body)
        body = summary.group(1) if summary else body
        return m.group(1) + body + ("" if body.endswith("\n") else "\n") + m.group(4)

    return _BLOCK.sub(fill, text), updated, missing


def main(readme: Path = README) -> None:
    text, updated, missing = render(readme.read_text())
    readme.write_text(text)
    print(f"{readme.name}: updated {', '.join(updated) or 'nothing'}"
          + (f"; no results file for {', '.join(missing)}" if missing else ""), file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else README)
