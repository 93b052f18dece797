"""The benchmark mac_check.sh runs, as a smoke test (small sizes; the test aid off macOS)."""
from rlx_metal.bench import run_benchmark, to_markdown


def test_the_benchmark_runs_and_says_what_it_measured():
    result = run_benchmark(quick=True)
    rows = {(r["what"], r["device"], r["engine"]): r for r in result["rows"]}
    metal = [r for (what, device, engine), r in rows.items() if device == "metal" and "gflops" in r]
    assert metal and all(r["rel_err"] < 1e-4 for r in metal)
    table = to_markdown(result)
    assert "| f32 matmul 256^3 | metal |" in table and "encoder block" in table
    ane = [r for (what, device, engine), r in rows.items() if device == "ane"]
    assert ane and all("ms" in r or r.get("note") for r in ane)
