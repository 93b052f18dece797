"""Shared by the llm_* benchmarks: timing by medians, and one results file per family.

Each benchmark owns a section of ``benchmarks/results/llm.json`` and rewrites only that
section; ``benchmarks/results/llm.md`` is regenerated from all sections each time, so
the README can include a table that is never half out of date.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
JSON_PATH, MD_PATH = RESULTS / "llm.json", RESULTS / "llm.md"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))       # the checkout's rlx_core


def median_seconds(fn, repeat: int = 20, warmup: int = 3, min_time: float = 0.0) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs (at least ``min_time`` seconds)."""
    for _ in range(warmup):
        fn()
    times, start = [], time.perf_counter()
    while len(times) < repeat or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine() -> dict:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def print_table(headers, rows) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(str(h).ljust(w) for h, w in zip(headers, widths)))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def save_section(name: str, data: dict, markdown: str) -> None:
    """Replace section ``name`` (its data and its markdown) and rewrite both files."""
    RESULTS.mkdir(exist_ok=True)
    results = json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else {}
    results[name] = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"), **data,
                     "markdown": markdown}
    JSON_PATH.write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results)


def write_markdown(results: dict) -> None:
    """``llm.md`` from every section's data: the targets first (what the README shows)."""
    parts = ["# LLM primitives: latest benchmark results\n",
             "Written by `benchmarks/llm_*.py`; medians of repeated runs on the machine named in each section.\n",
             "<!-- summary -->"]
    parts += [f"- {section}: {next(line for line in results[section]['markdown'].splitlines() if line.strip())}"
              for section in ("samplers", "kvquant", "scheduler") if section in results]
    parts += ["", "Details: [benchmarks/results/llm.md](benchmarks/results/llm.md).", "<!-- /summary -->\n"]
    for section in ("samplers", "kvquant", "scheduler"):
        if section in results:
            r = results[section]
            where = f"{r['date']}, {r['machine']['cpus']} CPUs, load {r['machine']['load_average'][0]}"
            parts.append(f"## {section} ({where})\n\n{r['markdown']}\n")
    MD_PATH.write_text("\n".join(parts))


def md_table(headers, rows) -> str:
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)
