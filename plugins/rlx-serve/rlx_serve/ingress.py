"""The ingress deployment: HTTP and Python callers in front of the model replicas.

It checks each request against the signature (a bad one never reaches a replica), sends
it to a model replica through a ``DeploymentHandle``, and answers. When the replica dies
under a request -- its process killed, its node gone -- Ray reports that as an actor error
and Serve starts a replacement; the ingress sends the request again (inference has no side
effects), up to ``retries`` times within ``request_timeout_s``, backing off between tries,
so an accepted request is answered unless every try fails. How many tries it took is in
the answer (``retries``).

``GET`` on the route answers the signature; ``POST`` runs (``rlx_serve.payload`` formats);
the Python handle has :meth:`Ingress.predict` (a ``Prediction``, or the ``RequestError``
raised) and :meth:`Ingress.info`. It needs no CPU of its own (``num_cpus=0``): its work is
waiting.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import BadRequestError, RequestError, ServeConfigError, as_request_error
from .local import keep_replica_server_on_loopback
from .model import Signature
from .payload import decode, encode, error_body
from .reply import Prediction

__all__ = ["Ingress", "IngressOptions"]


@dataclass(frozen=True)
class IngressOptions:
    """``retries``: re-sends of a request whose replica died (10, backing off from
    ``backoff_s`` doubling up to 2 s: about 11 s, the time Serve needs here to replace the
    only replica of a deployment); ``request_timeout_s``: the whole request's time limit,
    re-sends included; ``max_body_bytes``: the largest request body (413 above it)."""

    retries: int = 10
    request_timeout_s: float = 60.0
    max_body_bytes: int = 64 << 20
    backoff_s: float = 0.05

    def __post_init__(self):
        for name in ("retries", "max_body_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ServeConfigError(f"{name} must be an integer >= 0, got {value!r}")
        for name in ("request_timeout_s", "backoff_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ServeConfigError(f"{name} must be seconds > 0, got {value!r}")


def _replica_lost_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean the replica (not the request) failed."""
    from ray.exceptions import RayActorError, WorkerCrashedError  # RayActorError: ActorDiedError, ActorUnavailableError
    return RayActorError, WorkerCrashedError


class Ingress:
    def __init__(self, model, signature: Signature, options: IngressOptions):
        keep_replica_server_on_loopback()
        self.model, self.signature, self.options = model, signature, options
        self._lost = _replica_lost_errors()

    # --- Python handle --------------------------------------------------------------------
    async def predict(self, inputs: Mapping[str, Any]) -> Prediction:
        """The outputs of ``inputs`` (name -> array or nested list); raises the request's
        ``RequestError`` (``BadRequestError``, an ``InputError``, for the caller's mistakes)."""
        reply = await self.ask(inputs)
        if isinstance(reply, RequestError):
            raise reply
        return reply

    def info(self) -> dict[str, Any]:
        """The signature requests must follow, and the formats accepted."""
        return {"signature": self.signature.to_dict(),
                "formats": ["application/json", "application/x-npz", "application/x-npy"],
                "retries": self.options.retries, "request_timeout_s": self.options.request_timeout_s}

    async def ask(self, inputs: Mapping[str, Any]) -> "Prediction | RequestError":
        try:
            feeds = self.signature.check(inputs)
        except RequestError as e:
            return e
        deadline = time.monotonic() + self.options.request_timeout_s
        delay = self.options.backoff_s
        for attempt in range(self.options.retries + 1):
            left = deadline - time.monotonic()
            try:
                reply = await asyncio.wait_for(self.model.predict.remote(feeds), left)
            except self._lost as e:
                if attempt == self.options.retries or time.monotonic() + delay >= deadline:
                    return RequestError(f"the model replica died {attempt + 1} time(s) under this request; last: "
                                        f"{type(e).__name__}: {e}", 503, type(e).__name__)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)
                continue
            except asyncio.TimeoutError:
                return RequestError(f"no answer within request_timeout_s={self.options.request_timeout_s}",
                                    504, "TimeoutError")
            except Exception as e:  # noqa: BLE001 -- answered with its status, never a bare 500 page
                return as_request_error(e)
            return reply.with_retries(attempt) if isinstance(reply, Prediction) else reply
        raise AssertionError("unreachable: the last attempt returns")

    # --- HTTP -----------------------------------------------------------------------------
    async def __call__(self, request):
        from starlette.responses import JSONResponse, Response
        if request.url.path.rstrip("/") != request.scope.get("root_path", "").rstrip("/"):
            return _error(Response, BadRequestError(f"no such path {request.url.path!r}: POST or GET the route "
                                                    f"itself", 404, "NotFound"))
        if request.method == "GET":
            return JSONResponse(self.info())
        if request.method != "POST":
            return _error(Response, BadRequestError(f"method {request.method} not allowed: POST inputs, GET the "
                                                    f"signature", 405, "MethodNotAllowed"))
        try:
            fmt, inputs = decode(request.headers.get("content-type", ""), await self._body(request), self.signature)
            reply = await self.predict(inputs)
            body, media, headers = encode(reply, fmt)
        except RequestError as e:
            return _error(Response, e)
        return Response(body, media_type=media, headers=headers)

    async def _body(self, request) -> bytes:
        limit = self.options.max_body_bytes
        declared = request.headers.get("content-length")
        too_large = BadRequestError(f"the body exceeds max_body_bytes={limit}", 413, "PayloadTooLarge")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)


def _error(response_cls, err: RequestError):
    return response_cls(error_body(err), status_code=err.status, media_type="application/json")
