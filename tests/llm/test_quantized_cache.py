"""Quantized KV cache: per-layer formats, append/gather by token, the file-backed mode
with a 100k-token history (private files, never through a link; truncation and changed
rows raise CacheError), and streaming attention against torch."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlx_core.errors import CacheError, InputError, KVCacheFullError
from rlx_core.llm import LLMConfigError, QuantizedKVCache, QuantizedKVLayer, dequantize, quantize
from rlx_core.runtime.safefs import UntrustedPathError

ROOT = Path(__file__).resolve().parents[2]


def rows(n, kv_dim, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, n, kv_dim)).astype(np.float32)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q5_0", "f16"])
def test_append_and_read_by_token(fmt):
    layer = QuantizedKVLayer(64, fmt)
    k, v = rows(50, 64)
    for start, stop in ((0, 1), (1, 17), (17, 50)):            # one token, a prefill chunk, the rest
        layer.append(k[start:stop], v[start:stop])
    assert layer.num_tokens == 50 and layer.nbytes == 2 * 50 * quantize(k[0], fmt).size
    got_k, got_v = layer.read()
    np.testing.assert_array_equal(got_k, dequantize(quantize(k, fmt), fmt))
    np.testing.assert_array_equal(got_v, dequantize(quantize(v, fmt), fmt))
    np.testing.assert_array_equal(layer.read(10, 20)[0], got_k[10:20])
    np.testing.assert_array_equal(layer.gather([49, 3, 3, 20])[1], got_v[[49, 3, 3, 20]])


def test_rows_accept_head_layout():
    layer = QuantizedKVLayer(2 * 32, "q4_0")
    k, v = rows(5, 64)
    layer.append(k.reshape(5, 2, 32), v.reshape(5, 2, 32))
    np.testing.assert_array_equal(layer.read()[0], dequantize(quantize(k, "q4_0"), "q4_0"))


def test_per_layer_formats_and_sizes():
    cache = QuantizedKVCache(4, 128, ["f16", "q8_0", "q5_0", "q4_0"])
    k, v = rows(10, 128)
    for layer in cache.layers:
        layer.append(k, v)
    assert [layer.format.name for layer in cache.layers] == ["f16", "q8_0", "q5_0", "q4_0"]
    per_row = [128 * 2, 4 * 34, 4 * 22, 4 * 18]                 # GGML block sizes
    assert [layer.nbytes for layer in cache.layers] == [2 * 10 * b for b in per_row]
    assert cache.nbytes == sum(2 * 10 * b for b in per_row) and cache.num_tokens == 10


def test_file_backed_100k_token_history(tmp_path):
    """A 100k-token history in files, appended in chunks, read back and attended to; the
    mapping's pages are released after each access."""
    n, kv_dim, chunk = 100_000, 64, 8192
    cache = QuantizedKVCache(2, kv_dim, "q4_0", capacity=n, directory=tmp_path)
    rng = np.random.default_rng(3)
    for start in range(0, n, chunk):
        count = min(chunk, n - start)
        k = rng.standard_normal((count, kv_dim)).astype(np.float32)
        for layer in cache.layers:
            layer.append(k, -k)
    assert cache.num_tokens == n
    assert (tmp_path / "kv_0.bin").stat().st_size == 2 * n * (kv_dim // 32) * 18
    check = np.random.default_rng(3).standard_normal((chunk, kv_dim)).astype(np.float32)
    np.testing.assert_array_equal(cache[1].read(0, 5)[1], -dequantize(quantize(check[:5], "q4_0"), "q4_0"))
    q = rng.standard_normal((4, 32)).astype(np.float32)
    streamed = cache[0].attend(q, num_heads=4, chunk_tokens=10_000)
    k_all, v_all = cache[0].read()
    np.testing.assert_allclose(streamed, _dense_attention(q, k_all, v_all, 4), rtol=1e-4, atol=1e-5)
    with pytest.raises(KVCacheFullError, match="100000 of 100000 rows used, 1 more requested"):
        cache[0].append(check[:1], check[:1])
    cache.close()
    reopened = np.memmap(tmp_path / "kv_1.bin", np.uint8, "r").reshape(2, n, -1)
    np.testing.assert_array_equal(dequantize(np.array(reopened[0, :5]), "q4_0"),
                                  dequantize(quantize(check[:5], "q4_0"), "q4_0"))


def _dense_attention(q, k, v, num_heads):
    head_dim = q.shape[1]
    kv_heads = k.shape[1] // head_dim
    k = k.reshape(-1, kv_heads, head_dim).astype(np.float64)
    v = v.reshape(-1, kv_heads, head_dim).astype(np.float64)
    out = []
    for h in range(num_heads):
        g = h // (num_heads // kv_heads)
        s = k[:, g] @ q[h] / np.sqrt(head_dim)
        w = np.exp(s - s.max())
        out.append(w @ v[:, g] / w.sum())
    return np.array(out)


def test_streaming_attention_matches_torch_gqa():
    torch = pytest.importorskip("torch")
    layer = QuantizedKVLayer(2 * 16, "q8_0")
    k, v = rows(300, 32, seed=5)
    layer.append(k, v)
    q = np.random.default_rng(6).standard_normal((6, 16)).astype(np.float32)
    k_all, v_all = (t.reshape(300, 2, 16).transpose(1, 0, 2)[None] for t in layer.read())
    want = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q[None, :, None]), torch.from_numpy(np.ascontiguousarray(k_all)),
        torch.from_numpy(np.ascontiguousarray(v_all)), enable_gqa=True)
    got = layer.attend(q, num_heads=6, chunk_tokens=64)
    np.testing.assert_allclose(got, want.numpy()[0, :, 0], rtol=1e-5, atol=1e-6)
    assert not QuantizedKVLayer(32).attend(q[:2], 2).any()       # empty history: zeros


def test_quantized_attention_is_close_to_full_precision():
    k, v = rows(200, 64, seed=8)
    q = np.random.default_rng(9).standard_normal((2, 32)).astype(np.float32)
    exact = _dense_attention(q, k, v, 2)
    for fmt, tol in (("f16", 2e-3), ("q8_0", 2e-2), ("q5_0", 8e-2), ("q4_0", 1.5e-1)):
        layer = QuantizedKVLayer(64, fmt)
        layer.append(k, v)
        assert np.abs(layer.attend(q, 2) - exact).max() < tol, fmt


def test_errors(tmp_path):
    with pytest.raises(LLMConfigError, match="not a multiple of 32"):
        QuantizedKVLayer(48, "q8_0")
    with pytest.raises(LLMConfigError, match="needs a capacity"):
        QuantizedKVLayer(32, path=tmp_path / "x.bin")
    with pytest.raises(LLMConfigError, match="one per layer"):
        QuantizedKVCache(3, 32, ["q8_0", "q4_0"])
    layer = QuantizedKVLayer(32, "q8_0", capacity=4)
    with pytest.raises(InputError, match=r"k must be \[tokens, kv_dim=32\]"):
        layer.append(np.zeros((2, 30)), np.zeros((2, 30)))
    with pytest.raises(InputError, match="same tokens"):
        layer.append(np.zeros((2, 32)), np.zeros((3, 32)))
    with pytest.raises(KVCacheFullError, match="0 of 4 rows used, 5 more requested"):
        layer.append(np.zeros((5, 32)), np.zeros((5, 32)))
    layer.append(np.zeros((2, 32)), np.zeros((2, 32)))
    with pytest.raises(InputError, match=r"token range \[1, 3\) is outside the 2 cached tokens"):
        layer.read(1, 3)
    with pytest.raises(InputError, match="positions must be in"):
        layer.gather([2])
    with pytest.raises(InputError, match="multiple of the 2 KV heads"):
        layer.attend(np.zeros((3, 16)), 3)


# --- the file-backed mode as an attacker or a careless neighbour process would meet it ---

def _filled_layer(path, n=200, fmt="q8_0"):
    layer = QuantizedKVLayer(64, fmt, capacity=256, path=path)
    k, v = rows(n, 64, seed=11)
    layer.append(k, v)
    return layer


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes and links")
def test_kv_files_are_private_and_never_written_through_a_link(tmp_path):
    cache = QuantizedKVCache(2, 32, "q8_0", capacity=8, directory=tmp_path / "kv")
    assert stat.S_IMODE(os.stat(tmp_path / "kv").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "kv" / "kv_0.bin").st_mode) == 0o600
    cache.close()
    victim = tmp_path / "victim.txt"
    victim.write_text("someone's data")
    for planted in ("link", "dangling link", "hard link"):
        path = tmp_path / "kv" / "kv_0.bin"
        path.unlink()
        if planted == "link":
            path.symlink_to(victim)
        elif planted == "dangling link":
            path.symlink_to(tmp_path / "nowhere.bin")
        else:
            os.link(victim, path)
        if planted == "hard link":  # this user's own file: replaced, the other name keeps its data
            QuantizedKVCache(2, 32, "q8_0", capacity=8, directory=tmp_path / "kv").close()
            assert os.stat(path).st_ino != os.stat(victim).st_ino
        else:
            with pytest.raises(UntrustedPathError, match="is a symbolic link"):
                QuantizedKVCache(2, 32, "q8_0", capacity=8, directory=tmp_path / "kv")
        assert victim.read_text() == "someone's data" and not (tmp_path / "nowhere.bin").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_kv_files_only_in_a_folder_others_cannot_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UntrustedPathError, match="group or others may write"):
        QuantizedKVLayer(32, capacity=4, path=shared / "kv.bin")
    with pytest.raises(CacheError):
        QuantizedKVCache(1, 32, capacity=4, directory=shared)
    assert list(shared.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to make another user's file")
def test_another_users_kv_file_is_refused(tmp_path):
    path = tmp_path / "kv.bin"
    path.write_bytes(b"theirs")
    os.chown(path, 65534, 65534)
    with pytest.raises(UntrustedPathError, match="owned by uid 65534"):
        QuantizedKVLayer(32, capacity=4, path=path)
    assert path.read_bytes() == b"theirs"


TRUNCATE = r"""
import os, sys, numpy as np
from rlx_core.errors import CacheError
from rlx_core.llm import QuantizedKVLayer
path = sys.argv[1]
layer = QuantizedKVLayer(64, "q4_0", capacity=4096, path=path)
rows = np.random.default_rng(0).standard_normal((4096, 64)).astype(np.float32)
layer.append(rows, rows)
layer.read(0, 10)
os.truncate(path, 100)   # another process truncates the file underneath
for what, call in (("read", lambda: layer.read(4000, 4096)), ("attend", lambda: layer.attend(rows[:2, :32], 2)),
                   ("append", lambda: layer.append(rows[:0], rows[:0]))):
    try:
        call()
        print(what, "no error")
    except CacheError as e:
        print(what, "CacheError", e)
"""


def test_kv_file_truncated_underneath_is_an_error_not_sigbus(tmp_path):
    proc = subprocess.run([sys.executable, "-c", TRUNCATE, str(tmp_path / "kv.bin")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # -7 was SIGBUS
    lines = proc.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["read", "CacheError"], ["attend", "CacheError"],
                                                     ["append", "CacheError"]]
    assert "is 100 bytes, expected" in lines[0] and "truncated underneath" in lines[0]


@pytest.mark.parametrize("scale", [0x7C00, 0x7E00])  # f16 inf, nan
def test_kv_rows_changed_underneath_fail_their_checksum(tmp_path, scale):
    path = tmp_path / "kv.bin"
    layer = _filled_layer(path)
    clean_k, clean_v = layer.read()
    row_bytes = layer.row_bytes
    with open(path, "r+b") as f:  # the scale d of row 70's first block, in the V region
        f.seek((256 + 70) * row_bytes)
        f.write(scale.to_bytes(2, "little"))
    with pytest.raises(CacheError, match=r"V rows 64\.\.127 do not match their checksum"):
        layer.read()
    with pytest.raises(CacheError, match="checksum"):
        layer.gather([0, 70])
    np.testing.assert_array_equal(layer.read(0, 64)[1], clean_v[:64])  # other pages still read
    np.testing.assert_array_equal(layer.read(130, 200)[0], clean_k[130:200])
    layer.close()
    with pytest.raises(CacheError, match="closed"):
        layer.read(0, 1)


def test_page_checksums_follow_appends_of_any_size(tmp_path):
    layer = QuantizedKVLayer(32, "q5_0", capacity=300, path=tmp_path / "kv.bin")
    k, v = rows(300, 32, seed=12)
    at = 0
    for n in (1, 1, 62, 1, 63, 64, 100, 8):  # across and exactly onto page boundaries
        layer.append(k[at:at + n], v[at:at + n])
        at += n
        np.testing.assert_array_equal(layer.read()[0], dequantize(quantize(k[:at], "q5_0"), "q5_0"))
    for start, stop in ((0, 0), (63, 65), (64, 128), (299, 300), (5, 300)):
        np.testing.assert_array_equal(layer.read(start, stop)[1], dequantize(quantize(v[start:stop], "q5_0"), "q5_0"))
