"""The model server's edge, as one ASGI wrapper (issue 47): what a request must be before any endpoint runs.

- Host: only loopback names, the bound host and `--allowed-hosts` (a browser page on another name, DNS
  rebinding, gets 421 and reaches nothing).
- Token: with one set, every request but `GET /health` needs `Authorization: Bearer <token>`, compared in
  constant time.
- Body: bytes are counted as they arrive, a chunked body (no Content-Length) included; 413 as soon as the
  cap is passed, before the endpoint sees any of it.
- Concurrency: at most `max_chat` chat requests at once (each holds one of the server's worker threads while
  it waits for its samples), so progress and the rest keep threads; beyond it 429 with Retry-After.
"""
import hmac
import json
import threading

from .limits import Limits

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
OPEN_PATHS = {"/health"}  # answers without the token, and says nothing beyond ok
CHAT_PATHS = {"/v1/chat/completions"}


def allowed_hosts(bound: str, extra: list[str] | None = None) -> set[str]:
    return {h.lower() for h in (*LOOPBACK_NAMES, bound, *(extra or []))}


def _host_name(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):  # [v6]:port
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


async def _send_error(send, status: int, message: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"error": {"message": message, "code": status}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


class Guard:
    def __init__(self, app, token: str | None, limits: Limits, hosts: set[str] | None, max_chat: int = 32, retry_after_s: int = 1):
        self.app = app
        self.token = token
        self.limits = limits
        self.hosts = hosts  # None: any Host (tests that build the app themselves pass a set)
        self.max_chat = max_chat
        self.retry_after = str(retry_after_s).encode()
        self.chats = 0
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.hosts is not None and _host_name(headers.get("host", "")) not in self.hosts:
            return await _send_error(send, 421, f"host: {headers.get('host', '')!r} is not one of this server's names (--allowed-hosts)")
        path = scope.get("path", "")
        if self.token and path not in OPEN_PATHS:
            given = headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, f"Bearer {self.token}".encode()):
                return await _send_error(send, 401, "missing or wrong bearer token")
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and (refusal := self.limits.body_refusal(int(declared))):
            return await _send_error(send, 413, refusal)
        # Read the body here, counting, so a chunked one cannot pass the cap; the endpoint gets it replayed.
        messages, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            size += len(message.get("body", b""))
            if refusal := self.limits.body_refusal(size):
                return await _send_error(send, 413, refusal)
            messages.append(message)
            if not message.get("more_body", False):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        chat = path in CHAT_PATHS
        if chat:
            with self.lock:
                busy = self.chats >= self.max_chat
                if not busy:
                    self.chats += 1
            if busy:
                return await _send_error(send, 429, f"{self.max_chat} chat requests are running (--max-concurrent-chats): retry later",
                                         [(b"retry-after", self.retry_after)])  # fmt: skip
        try:
            await self.app(scope, replay, send)
        finally:
            if chat:
                with self.lock:
                    self.chats -= 1
