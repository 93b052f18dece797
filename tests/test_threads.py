"""One CompiledGraph shared by many threads (issue 20, item 3).

Inputs staged with ``set_input`` belong to the thread that staged them, and ``run``
may be called from any number of threads at once: no run ever reads another thread's
input, and none raises a spurious "missing input". The soak test runs 8 threads x 2000
runs on cpu and on tpu (XLA:CPU unless ``RLX_TPU_PLATFORM`` says otherwise) and checks
every result.
"""
import threading

import numpy as np
import pytest

from rlx_core import Graph, Session, Shape
from rlx_core.errors import InputError

THREADS, RUNS = 8, 2000


def _graph():
    g = Graph("threads")
    x = g.input("x", Shape((4,), "f32"))
    b = g.param("b", Shape((4,), "f32"))
    g.set_outputs([x * 2.0 + b])
    return g


def _compiled(device):
    c = Session(device).compile(_graph())
    c.set_param("b", np.ones(4, np.float32))
    return c


def test_staged_inputs_belong_to_the_staging_thread():
    """Thread A stages, thread B stages and runs, then A runs: A gets its own input (it
    used to get B's, or a "missing input" once B's run had cleared the shared staging)."""
    c = _compiled("cpu")
    a_staged, b_done = threading.Event(), threading.Event()
    results = {}

    def thread_a():
        c.set_input("x", np.full(4, 1.0, np.float32))
        a_staged.set()
        b_done.wait(10)
        results["a"] = c.run()[0]

    def thread_b():
        a_staged.wait(10)
        c.set_input("x", np.full(4, 100.0, np.float32))
        results["b"] = c.run()[0]
        b_done.set()

    workers = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(20)
    np.testing.assert_array_equal(results["a"], np.full(4, 3.0, np.float32))
    np.testing.assert_array_equal(results["b"], np.full(4, 201.0, np.float32))


def test_a_thread_without_staged_inputs_still_misses_them():
    c = _compiled("cpu")
    c.set_input("x", np.zeros(4, np.float32))
    errors = []
    worker = threading.Thread(target=lambda: errors.append(pytest.raises(InputError, c.run)))
    worker.start()
    worker.join(10)
    assert errors and "missing input" in str(errors[0].value)
    np.testing.assert_array_equal(c.run()[0], np.ones(4, np.float32))  # this thread's staging is intact


def _soak(c):
    """8 threads x 2000 runs, alternating run(inputs) and set_input + run(); every result
    is checked against what that thread gave."""
    barrier = threading.Barrier(THREADS)
    failures: list[str] = []

    def worker(t):
        barrier.wait()
        try:
            for i in range(RUNS):
                x = np.full(4, t * 10_000 + i, np.float32)
                if i % 2:
                    out = c.run({"x": x})[0]
                else:
                    c.set_input("x", x)
                    out = c.run()[0]
                if not np.array_equal(out, x * 2 + 1):
                    failures.append(f"thread {t} run {i}: got {out}, expected {x * 2 + 1}")
        except Exception as e:  # recorded, so the main thread reports it
            failures.append(f"thread {t}: {type(e).__name__}: {e}")

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    assert not any(w.is_alive() for w in workers), "a worker thread hung"
    assert not failures, f"{len(failures)} bad runs, e.g. {failures[:3]}"


def test_8_threads_x_2000_runs_on_cpu():
    _soak(_compiled("cpu"))


def test_8_threads_x_2000_runs_on_tpu(tpu_device):  # (tests/conftest.py: XLA:CPU unless set)
    _soak(_compiled(tpu_device))
