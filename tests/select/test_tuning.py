"""Calibration files are data a device choice depends on: implausible figures and files
that are not trusted (a link, another user's, writable by others) are ignored with a
warning and measured again -- in the core's Calibration cache and in a plugin's own
tuning file (rlx_core.select.tuning)."""
import json
import logging
import os
import sys

import pytest

from rlx_core.select import calibration as cal
from rlx_core.select import load_calibration
from rlx_core.select.tuning import (batch_seconds, cached_tuning, positive_figures, read_tuning, tuning_path,
                                    write_tuning)

KEYS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns")
GOOD = {"sgemm_gflops": 900.0, "memory_bw_gbps": 40.0, "roundtrip_overhead_ns": 20_000.0}


def _valid(data):
    return positive_figures(data, KEYS)


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 1e308, 1e-300, -1.0, 0, True, "fast"])
def test_implausible_tuning_figures_are_measured_again(bad, caplog):
    path = tuning_path("test-calib", "dev")
    assert write_tuning(path, {**GOOD, "sgemm_gflops": bad})
    if isinstance(bad, float) and bad == float("inf"):
        assert "Infinity" in path.read_text()
    with caplog.at_level(logging.WARNING, logger="rlx.select.tuning"):
        assert read_tuning(path, _valid) is None
    assert "sgemm_gflops" in caplog.text and "measuring again" in caplog.text
    measured = cached_tuning(path, _valid, lambda: dict(GOOD))
    assert measured == GOOD and read_tuning(path, _valid) == GOOD  # re-measured and written back


def test_tuning_files_are_written_private_and_atomically():
    path = tuning_path("test-calib", "dev")
    assert write_tuning(path, GOOD) and write_tuning(path, GOOD)
    assert os.listdir(path.parent) == [path.name]  # no temporaries left
    if sys.platform != "win32":
        assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(path.parent).st_mode & 0o777 == 0o700


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and modes")
def test_untrusted_tuning_files_are_not_read(tmp_path, caplog):
    path = tuning_path("test-calib", "dev")
    assert write_tuning(path, GOOD)
    os.chmod(path, 0o666)
    with caplog.at_level(logging.WARNING, logger="rlx.select.tuning"):
        assert read_tuning(path, _valid) is None
    assert "group or others may write" in caplog.text
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps(GOOD))
    path.unlink()
    path.symlink_to(planted)
    assert read_tuning(path, _valid) is None and "symbolic link" in caplog.text
    write_tuning(path, GOOD)  # replaces the link itself; the link's target is left alone
    assert not path.is_symlink() and planted.read_text() == json.dumps(GOOD)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_a_cache_folder_others_may_write_is_not_written(caplog):
    folder = cal.cache_dir()
    folder.mkdir(parents=True)
    os.chmod(folder, 0o777)
    with caplog.at_level(logging.WARNING):
        assert not write_tuning(tuning_path("test-calib", "dev"), GOOD)
    assert "group or others may write" in caplog.text and os.listdir(folder) == []


@pytest.mark.parametrize("sgemm", [1e308, float("inf")])
def test_implausible_calibration_is_ignored_with_a_warning(helpers, sgemm, caplog):
    path = helpers.write_calibration("cpu", "cpu", sgemm=sgemm)
    with caplog.at_level(logging.WARNING, logger="rlx.select.calibration"):
        assert load_calibration("cpu") is None
    assert "sgemm_gflops" in caplog.text and "re-measuring" in caplog.text
    helpers.write_calibration("cpu", "cpu", sgemm=1234.0)
    cal.clear_memo()
    assert load_calibration("cpu").sgemm_gflops == 1234.0
    assert path.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX links")
def test_linked_calibration_is_ignored_with_a_warning(helpers, tmp_path, caplog):
    path = helpers.write_calibration("cpu", "cpu")
    planted = tmp_path / "planted.json"
    planted.write_text(path.read_text())
    path.unlink()
    path.symlink_to(planted)
    with caplog.at_level(logging.WARNING, logger="rlx.select.calibration"):
        assert load_calibration("cpu") is None
    assert "symbolic link" in caplog.text and "re-measuring" in caplog.text


def test_batch_seconds_takes_the_devices_own_time_when_it_is_plausible():
    """A run may report its batch's device time (GPU timestamps): that is what counts, not
    the wall time around it; a figure above the wall time or not positive is not believed."""
    import time
    calls = []

    def run(device_per_run):
        def batch(repeats):
            calls.append(repeats)
            time.sleep(0.002 * repeats)
            return None if device_per_run is None else device_per_run * repeats
        return batch
    assert batch_seconds(run(0.0005), min_seconds=0.02) == pytest.approx(0.0005)
    assert calls[0] == 1 and all(r >= 2 for r in calls[1:])
    for implausible in (None, 0.0, 1.0):  # wall time instead: about the 2 ms slept
        assert 0.002 <= batch_seconds(run(implausible), min_seconds=0.02) < 0.05
