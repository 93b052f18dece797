"""The fft family's reference kernels and helpers against torch.fft, scipy.fft /
scipy.signal and onnxruntime's DFT / STFT; plus the build-time errors."""
import numpy as np
import pytest

from rlx_core import Graph, evaluate
from rlx_core.errors import DTypeError, OpAttributeError, ShapeError
from rlx_core.testing.external import run_onnx_graph

torch = pytest.importorskip("torch")
sfft = pytest.importorskip("scipy.fft")

RNG = np.random.default_rng(7)
NORMS = ["backward", "forward", "ortho"]


def _run(build, *arrays):
    """Evaluate ``build(g, *inputs)`` on the reference interpreter."""
    g = Graph("fft")
    ins = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    out = build(g, *ins)
    g.set_outputs(list(out) if isinstance(out, (list, tuple)) else [out])
    res = evaluate(g, {f"x{i}": a for i, a in enumerate(arrays)})
    return res if len(res) > 1 else res[0]


def _close(got, want, dtype_eps):
    """Spectra: error relative to the largest magnitude (bins near 0 carry no scale)."""
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(np.abs(want).max(initial=0.0), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=dtype_eps * scale)


def _complex(shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("dims,axis,n", [((4, 16), -1, None), ((5, 9), 0, None), ((3, 7), -1, 12),
                                         ((3, 10), 1, 6), ((2, 3, 13), 1, None)])
def test_fft_matches_torch_and_scipy(dims, axis, n, inverse, norm):
    for dtype, eps in ((np.complex64, 2e-6), (np.complex128, 1e-13)):
        x = _complex(dims, dtype)
        got = _run(lambda g, v: g.fft(v, n=n, axis=axis, norm=norm, inverse=inverse), x)
        assert got.dtype == dtype
        fn = (torch.fft.ifft if inverse else torch.fft.fft)
        _close(got, fn(torch.from_numpy(x), n=n, dim=axis, norm=norm).numpy(), eps)
        _close(got, (sfft.ifft if inverse else sfft.fft)(x, n=n, axis=axis, norm=norm), eps)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dims,axis,n", [((4, 16), -1, None), ((6, 5), 0, None), ((3, 9), -1, 14),
                                         ((3, 9), -1, 4), ((1,), 0, None)])
def test_rfft_matches_torch_and_scipy(dims, axis, n, norm):
    for dtype, eps in ((np.float32, 2e-6), (np.float64, 1e-13)):
        x = RNG.standard_normal(dims).astype(dtype)
        got = _run(lambda g, v: g.rfft(v, n=n, axis=axis, norm=norm), x)
        assert got.dtype == (np.complex128 if dtype == np.float64 else np.complex64)
        _close(got, torch.fft.rfft(torch.from_numpy(x), n=n, dim=axis, norm=norm).numpy(), eps)
        _close(got, sfft.rfft(x, n=n, axis=axis, norm=norm), eps)


def test_rfft_of_low_floats_is_computed_in_f32():
    x = RNG.standard_normal((3, 12)).astype(np.float16)
    got = _run(lambda g, v: g.rfft(v), x)
    _close(got, torch.fft.rfft(torch.from_numpy(x.astype(np.float32))).numpy(), 2e-6)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("bins,n,axis", [(5, None, -1), (5, 9, -1), (8, 6, -1), (4, 11, 0), (3, 1, -1)])
def test_irfft_matches_torch_and_scipy(bins, n, axis, norm):
    # A general complex input: the imaginary parts of DC (and Nyquist) must be ignored.
    dims = (bins, 3) if axis == 0 else (3, bins)
    for dtype, eps in ((np.complex64, 4e-6), (np.complex128, 1e-13)):
        x = _complex(dims, dtype)
        got = _run(lambda g, v: g.irfft(v, n=n, axis=axis, norm=norm), x)
        assert got.dtype == (np.float64 if dtype == np.complex128 else np.float32)
        _close(got, torch.fft.irfft(torch.from_numpy(x), n=n, dim=axis, norm=norm).numpy(), eps)
        _close(got, sfft.irfft(x, n=n, axis=axis, norm=norm), eps)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 31])
def test_roundtrips_are_identities_in_every_norm(n):
    x = RNG.standard_normal((2, n))
    for norm in NORMS:
        back = _run(lambda g, v: [g.irfft(g.rfft(v, norm=norm), n=n, norm=norm),
                                  g.ifft(g.fft(v, norm=norm), norm=norm)], x)
        np.testing.assert_allclose(back[0], x, atol=1e-12)
        np.testing.assert_allclose(back[1], x.astype(np.complex128), atol=1e-12)


def _ort_session(node, inputs, opset):
    pytest.importorskip("onnxruntime")
    return run_onnx_graph([node], inputs, ["y"], opset=opset)[0]


# (ONNX DFT defines onesided only for forward transforms.)
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (1, 0), (0, 1)])
def test_fft_matches_onnx_dft(inverse, onesided):
    from onnx import helper
    n = 10
    x = RNG.standard_normal((3, n, 1 if onesided else 2)).astype(np.float32)
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=inverse, onesided=onesided)
    want = _ort_session(node, {"x": x, "axis": np.array(1, np.int64)}, 20)
    want = want[..., 0] + 1j * want[..., 1]
    if onesided:
        got = _run(lambda g, v: g.rfft(v), x[..., 0])
    else:
        got = _run(lambda g, v: g.fft(v, inverse=bool(inverse)), (x[..., 0] + 1j * x[..., 1]).astype(np.complex64))
    _close(got, want, 2e-6)


@pytest.mark.parametrize("dims,args", [((2, 10), (4, 3, -1)), ((9, 2), (3, 2, 0)), ((12,), (2, 5, -1)),
                                       ((6,), (6, 1, -1))])
def test_frame_matches_torch_unfold(dims, args):
    frame_len, hop, axis = args
    x = RNG.standard_normal(dims).astype(np.float32)
    want = torch.from_numpy(x).unfold(axis % x.ndim, frame_len, hop)  # torch puts the frame axis last
    want = torch.movedim(want, -1, axis % x.ndim + 1).numpy()
    np.testing.assert_array_equal(_run(lambda g, v: g.frame(v, *args), x), want)


def test_frame_of_a_short_signal_has_no_frames():
    out = _run(lambda g, v: g.frame(v, 5, 2), np.zeros((2, 3), np.int32))
    assert out.shape == (2, 0, 5) and out.dtype == np.int32


@pytest.mark.parametrize("frame_len,hop,window", [(16, 4, "hann"), (8, 8, None), (7, 3, "hamming")])
def test_stft_matches_torch_stft(frame_len, hop, window):
    x = RNG.standard_normal((2, 75)).astype(np.float32)
    win = torch.ones(frame_len) if window is None else getattr(torch, f"{window}_window")(frame_len)
    want = torch.stft(torch.from_numpy(x), n_fft=frame_len, hop_length=hop, window=win, center=False,
                      onesided=True, return_complex=True).numpy()
    got = _run(lambda g, v: g.stft(v, frame_len, hop, None if window is None else win.numpy()), x)
    _close(got, np.swapaxes(want, -1, -2), 4e-6)


def test_stft_matches_onnx_stft():
    from onnx import helper
    x = RNG.standard_normal((1, 50, 1)).astype(np.float32)
    win = np.hanning(8).astype(np.float32)
    node = helper.make_node("STFT", ["x", "step", "w"], ["y"], onesided=1)
    want = _ort_session(node, {"x": x, "step": np.array(3, np.int64), "w": win}, 17)
    got = _run(lambda g, v: g.stft(v, 8, 3, win), x[..., 0])
    _close(got, want[..., 0] + 1j * want[..., 1], 4e-6)


@pytest.mark.parametrize("n", [10, 11])
def test_psd_is_the_undoubled_periodogram(n):
    signal = pytest.importorskip("scipy.signal")
    x = RNG.standard_normal((3, n))
    got = _run(lambda g, v: g.psd(v), x)
    _, pxx = signal.periodogram(x, fs=1.0, window="boxcar", detrend=False, scaling="density")
    doubled = got.copy()
    doubled[:, 1:(n + 1) // 2] *= 2  # every bin but DC and (even n) Nyquist
    np.testing.assert_allclose(doubled, pxx, rtol=1e-12)
    full = np.abs(np.fft.fft(x)) ** 2 / n
    np.testing.assert_allclose(full.sum(-1), (x ** 2).sum(-1))  # Parseval, as documented
    f16 = _run(lambda g, v: g.psd(v, axis=0), x.T.astype(np.float16))
    assert f16.dtype == np.float16 and f16.shape == (n // 2 + 1, 3)


@pytest.mark.parametrize("n,d", [(1, 1.0), (8, 0.1), (9, 2.0)])
def test_fftfreq_matches_torch(n, d):
    g = Graph("freq")
    g.set_outputs([g.fftfreq(n, d), g.rfftfreq(n, d, dtype="f64")])
    f, rf = evaluate(g)
    np.testing.assert_allclose(f, torch.fft.fftfreq(n, d).numpy(), rtol=1e-6)
    np.testing.assert_allclose(rf, torch.fft.rfftfreq(n, d, dtype=torch.float64).numpy(), rtol=1e-15)
    assert f.dtype == np.float32


def test_build_errors_name_the_problem():
    g = Graph("bad")
    c = g.input("c", (4, 8), "c64")
    r = g.input("r", (4, 8))
    with pytest.raises(OpAttributeError, match="norm must be one of backward, forward, ortho, got 'none'"):
        g.fft(c, norm="none")
    with pytest.raises(OpAttributeError, match=r"n >= 1, got n=0 \(axis 1 of \[4, 8\] has length 8\)"):
        g.rfft(r, n=0)
    with pytest.raises(OpAttributeError, match="n >= 1, got n=0"):
        g.irfft(g.input("one", (3, 1), "c64"))  # default n = 2 * (1 - 1)
    with pytest.raises(ShapeError, match="fft axis 2 is out of range for rank 2"):
        g.fft(c, axis=2)
    with pytest.raises(ShapeError, match="out of range for rank 0"):
        g.rfft(g.input("s", ()))
    with pytest.raises(DTypeError, match="fft does not accept i32"):
        g.fft(g.input("i", (4,), "i32"))
    with pytest.raises(DTypeError, match="rfft does not accept c64"):
        g.rfft(c)
    with pytest.raises(OpAttributeError, match="frame_len >= 1 and hop >= 1"):
        g.frame(r, 4, 0)
    with pytest.raises(ShapeError, match=r"stft window must have dims \[4\] \(frame_len\), got \[3\]"):
        g.stft(r, 4, 2, np.ones(3))
    with pytest.raises(OpAttributeError, match="integer n >= 1"):
        g.fftfreq(0)
    with pytest.raises(OpAttributeError, match="non-zero sample spacing"):
        g.rfftfreq(4, 0.0)
    assert g.fft(r).dtype.value == "c64" and g.fft(g.input("d", (3,), "f64")).dtype.value == "c128"


def test_fast_fft_length_is_scipys_next_fast_len():
    from rlx_core.ir.ops.fft import fast_fft_length
    assert [fast_fft_length(n) for n in range(1, 3000)] == [sfft.next_fast_len(n, real=True) for n in range(1, 3000)]


@pytest.mark.parametrize("la,lb", [(1, 1), (5, 3), (3, 5), (17, 17), (100, 7), (64, 65)])
def test_fft_conv1d_matches_np_convolve(la, lb):
    a, b = RNG.standard_normal(la), RNG.standard_normal(lb)
    np.testing.assert_allclose(_run(lambda g, x, y: g.fft_conv1d(x, y), a, b), np.convolve(a, b), atol=1e-12)
    got = _run(lambda g, x, y: g.fft_conv1d(x, y), a.astype(np.float32), b.astype(np.float32))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.convolve(a, b), atol=2e-5 * max(la, lb))


def test_fft_conv1d_broadcasts_leading_axes_like_fftconvolve():
    signal = pytest.importorskip("scipy.signal")
    a, b = RNG.standard_normal((4, 1, 30)), RNG.standard_normal((3, 9))
    got = _run(lambda g, x, y: g.fft_conv1d(x, y), a, b)
    assert got.shape == (4, 3, 38)
    np.testing.assert_allclose(got, signal.fftconvolve(a, b[None], axes=-1), atol=1e-12)
    f16 = _run(lambda g, x, y: g.fft_conv1d(x, y), a.astype(np.float16), b.astype(np.float16))
    assert f16.dtype == np.float16
    with pytest.raises(ShapeError, match="fft_conv1d needs real float signals"):
        _run(lambda g, x, y: g.fft_conv1d(x, y), np.ones(3, np.int32), np.ones(2, np.int32))
    with pytest.raises(ShapeError, match="non-empty last axes"):
        _run(lambda g, x, y: g.fft_conv1d(x, y), np.ones((2, 0)), np.ones(2))
