"""HTTP payloads: JSON, and numpy's own formats for arrays of any size and dtype.

* ``application/json``: ``{"inputs": {"x": [[...]], ...}}`` (lists take the input's declared
  dtype); the answer is ``{"outputs": {"y": [[...]]}, "device": ..., "replica": ...,
  "pid": ..., "fallback": [[device, error], ...], "retries": n}``.
* ``application/x-npz``: an ``np.savez`` archive, one array per input; the answer is an
  archive of the outputs, and the rest of the answer travels in ``X-RLX-*`` headers.
* ``application/x-npy``: one ``np.save`` array for a graph of one input; the answer is one
  array for a graph of one output, else an archive.

Archives are read with ``allow_pickle=False``: a request can never make the server unpickle.
Every problem is a ``BadRequestError`` with its status (400, 406, 413, 415).
"""
from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from .errors import BadRequestError
from .model import Signature
from .reply import Prediction

__all__ = ["JSON", "NPZ", "NPY", "decode", "encode", "error_body"]

JSON, NPZ, NPY = "application/json", "application/x-npz", "application/x-npy"


def decode(content_type: str, body: bytes, signature: Signature) -> tuple[str, dict[str, Any]]:
    """``(format, inputs)`` of a request body; the format is the answer's too."""
    media = (content_type or JSON).split(";")[0].strip().lower()
    if media == JSON:
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, ValueError) as e:
            raise BadRequestError(f"the body is not JSON: {e}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
            raise BadRequestError('a JSON request is {"inputs": {"<input name>": <nested list>, ...}}, got '
                                  + (f"keys {sorted(doc)}" if isinstance(doc, dict) else type(doc).__name__))
        return JSON, doc["inputs"]
    if media in (NPZ, NPY):
        try:
            loaded = np.load(io.BytesIO(body), allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise BadRequestError(f"the body is not a numpy {media[-3:]} file: {e}") from None
        if media == NPY:
            if not isinstance(loaded, np.ndarray):
                raise BadRequestError(f"the {NPY} body holds an archive; send it as {NPZ}")
            if len(signature.inputs) != 1:
                raise BadRequestError(f"{NPY} carries one array, this graph has {len(signature.inputs)} inputs "
                                      f"({', '.join(t.name for t in signature.inputs)}): send {NPZ}")
            return NPY, {signature.inputs[0].name: loaded}
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise BadRequestError(f"the {NPZ} body holds a single array; send it as {NPY} or as an archive")
        with loaded:
            return NPZ, {k: loaded[k] for k in loaded.files}
    raise BadRequestError(f"unsupported Content-Type {media!r}: send {JSON}, {NPZ} or {NPY}", 415)


def encode(reply: Prediction, fmt: str) -> tuple[bytes, str, dict[str, str]]:
    """``(body, media type, headers)`` of an answer in the request's format."""
    meta = reply.meta()
    if fmt == JSON:
        outputs = {name: _json_ready(name, arr) for name, arr in reply.outputs.items()}
        return json.dumps({"outputs": outputs, **meta}).encode(), JSON, {}
    headers = {"x-rlx-device": reply.device, "x-rlx-replica": reply.replica, "x-rlx-pid": str(reply.pid),
               "x-rlx-retries": str(reply.retries), "x-rlx-fallback": json.dumps(meta["fallback"])}
    buf = io.BytesIO()
    if fmt == NPY and len(reply.outputs) == 1:
        np.save(buf, next(iter(reply.outputs.values())), allow_pickle=False)
        return buf.getvalue(), NPY, headers
    np.savez(buf, **reply.outputs)
    return buf.getvalue(), NPZ, headers


def _json_ready(name: str, arr: np.ndarray) -> Any:
    if arr.dtype.kind == "c":
        raise BadRequestError(f"output '{name}' is complex ({arr.dtype}), which JSON cannot carry: send {NPZ}", 406)
    if arr.dtype.kind not in "biuf":  # bfloat16 and the other ml_dtypes floats
        arr = arr.astype(np.float32)
    return arr.tolist()


def error_body(err) -> bytes:
    """``{"error": <error class>, "message": <its message>}``."""
    return json.dumps({"error": err.kind, "message": str(err)}).encode()
