"""`rlx demo` runs the transformer block on every available device and checks it."""
from rlx_core.cli import main


def test_demo_checks_every_available_device(capsys):
    assert main(["demo", "--devices", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "transformer block" in out
    row = next(line for line in out.splitlines() if line.startswith("cpu "))
    assert " ok " in row and "pick fastest" in row
