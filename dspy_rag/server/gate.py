"""What every request passes before a route sees it: the bearer token (when `serve.token` is set; a browser reads
the web page's own files without it), the size limit of its body, and the last line of defence that turns any
failure into a one-line JSON reason, never a traceback."""

import hmac
import json
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dspy_rag.config import ServeConfig
from dspy_rag.errors import one_line, redact

log = logging.getLogger("dspy_rag.server")


async def refuse(send: Send, status: int, text: str, headers: dict[str, str] | None = None) -> None:
    """A response of one JSON line, {"error": text}."""
    body = json.dumps({"error": one_line(redact(text))}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           *((k.encode(), v.encode()) for k, v in (headers or {}).items())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def gate_options(serve: ServeConfig) -> dict[str, Any]:
    """The gate's options from the configuration: the token (or None) and the body limit."""
    return {"token": serve.token.get_secret_value() if serve.token else None, "max_body_bytes": serve.max_body_bytes}


class TooLarge(Exception):
    pass


class Gate:
    def __init__(self, app: ASGIApp, token: str | None, max_body_bytes: int, public: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.token = f"Bearer {token}".encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.public = public  # paths read with GET without the token: files that hold no data

    def guarded(self, scope: Scope) -> bool:
        return self.token is not None and not (scope["method"] == "GET" and scope["path"] in self.public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.guarded(scope) and not hmac.compare_digest(headers.get(b"authorization", b""), self.token or b""):
            await refuse(send, 401, "this server needs its token: send the header Authorization: Bearer <serve.token>",
                         {"www-authenticate": "Bearer"})
            return
        try:
            body = await self._body(headers, receive)
        except TooLarge:
            await refuse(send, 413, f"the request body is over {self.max_body_bytes:,} bytes (serve.max_body_bytes); "
                         "send less")
            return
        started = False

        async def replay() -> Message:
            nonlocal body
            if body is not None:
                message, body = {"type": "http.request", "body": body, "more_body": False}, None
                return message
            return await receive()  # after the body: the client's disconnect

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, replay, watched)
        except Exception as exc:
            log.error("%s %s failed: %s: %s", scope["method"], scope["path"], type(exc).__name__,
                      one_line(redact(str(exc))))
            if not started:
                await refuse(send, 500, f"unexpected {type(exc).__name__}; the server log has its one line")

    async def _body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        """The whole body, refused as soon as it grows over the limit (whatever Content-Length claims)."""
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise TooLarge
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message: Any = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body_bytes:
                raise TooLarge
            more = message.get("more_body", False)
        return b"".join(chunks)
