"""Issue 47: the model server's posture and its bounds (guard.py and the endpoints it protects)."""
import asyncio
import threading
from concurrent.futures import Future

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from evalrl_trainer.adapters import Adapters
from evalrl_trainer.guard import Guard, allowed_hosts
from evalrl_trainer.sampler import Sampler
from evalrl_trainer.server import Limits, create_app
from evalrl_trainer.trainer import Cancelled, Trainer

TOKEN = "s3cret-token-for-tests"


def app_with(tiny_base, tmp_path, limits=Limits(), hosts=None, token=TOKEN):
    adapters = Adapters(tiny_base, tmp_path)
    sampler = Sampler(adapters, mode="deterministic")
    trainer = Trainer(adapters)
    return create_app(adapters, sampler, trainer, token, limits, hosts), sampler, trainer


def run_asgi(app, path, chunks, headers=()):
    """Calls the ASGI app with a body sent in `chunks` (no Content-Length: chunked); returns (status, chunks read)."""
    read = []
    sent = []

    async def receive():
        if len(read) < len(chunks):
            read.append(chunks[len(read)])
            return {"type": "http.request", "body": read[-1], "more_body": len(read) < len(chunks)}
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {TOKEN}".encode()), *headers],
             "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 1), "root_path": ""}  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return next(m["status"] for m in sent if m["type"] == "http.response.start"), len(read)


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_cap(tiny_base, tmp_path):
    app, _, _ = app_with(tiny_base, tmp_path, Limits(request_bytes=1 << 20))
    chunks = [b"x" * (512 << 10)] * 100  # 50 MiB against a 1 MiB cap, with no Content-Length
    status, read = run_asgi(app, "/tokenize", chunks)
    assert status == 413
    assert read <= 3  # refused once the cap was passed, not after reading all 50 MiB


def test_health_answers_ok_without_the_token_and_the_counters_need_it(tiny_base, tmp_path):
    app, _, _ = app_with(tiny_base, tmp_path)
    client = TestClient(app)
    assert client.get("/health").json() == {"ok": True}
    assert client.get("/usage").status_code == 401
    usage = client.get("/usage", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert usage["mode"] == "deterministic" and "prefix_cache" in usage and "sampling" in usage


def test_other_host_names_are_refused(tiny_base, tmp_path):
    app, _, _ = app_with(tiny_base, tmp_path, hosts=allowed_hosts("10.0.0.5", ["gpu1.internal"]))
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    for host in ("127.0.0.1:8000", "localhost", "10.0.0.5:8000", "gpu1.internal:8000", "[::1]:8000"):
        assert client.get("/v1/models", headers={"Host": host}).status_code == 200, host
    rebound = client.get("/v1/models", headers={"Host": "evil.example:8000"})
    assert rebound.status_code == 421 and rebound.json()["error"]["message"].startswith("host")
    assert client.get("/health", headers={"Host": "evil.example"}).status_code == 421


def test_a_wrong_token_is_refused(tiny_base, tmp_path):
    app, _, _ = app_with(tiny_base, tmp_path)
    client = TestClient(app)
    for auth in ("", "Bearer wrong", f"Bearer {TOKEN}x", TOKEN):
        assert client.get("/v1/models", headers={"Authorization": auth}).status_code == 401


def test_a_cancelled_step_answers_a_retryable_503(tiny_base, tmp_path, monkeypatch):
    app, _, trainer = app_with(tiny_base, tmp_path)

    def cancelled(adapter, step, *args):
        raise Cancelled(f"step {step} of '{adapter}' was cancelled; nothing was saved")

    monkeypatch.setattr(trainer, "step", cancelled)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    seq = {"token_ids": [5, 6, 7, 8], "mask": [0, 0, 1, 1], "logprobs": [-1.0] * 4, "advantage": 1.0}
    r = client.post("/train/step", json={"adapter": "policy", "step": 1, "sequences": [seq]})
    assert r.status_code == 503 and "was cancelled" in r.json()["error"]["message"]


def test_stop_lists_are_bounded_by_name(tiny_base, tmp_path):
    app, _, _ = app_with(tiny_base, tmp_path)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    msg = [{"role": "user", "content": "x"}]
    many = client.post("/v1/chat/completions", json={"messages": msg, "stop": list("abcde")})
    assert many.status_code == 400 and many.json()["error"]["message"].startswith("stop")
    long = client.post("/v1/chat/completions", json={"messages": msg, "stop": "y" * 257})
    assert long.status_code == 400 and long.json()["error"]["message"].startswith("stop")
    ok = client.post("/v1/chat/completions", json={"messages": msg, "stop": list("abcd"), "max_tokens": 2})
    assert ok.status_code == 200, ok.text


def test_a_full_sampler_queue_answers_429_with_retry_after(tiny_base, tmp_path):
    app, _, _ = app_with(tiny_base, tmp_path, Limits(queued_samples=3))
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "n": 4, "max_tokens": 2})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert "--max-queued-samples" in r.json()["error"]["message"]


def test_concurrent_chats_beyond_the_cap_answer_429():
    release = asyncio.Event()

    async def slow(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = Guard(slow, token=None, limits=Limits(), hosts=None, max_chat=2)

    async def one():
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(m):
            sent.append(m)

        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
        await guard(scope, receive, send)
        return sent[0]["status"], dict(sent[0]["headers"])

    async def main():
        tasks = [asyncio.create_task(one()) for _ in range(3)]
        await asyncio.sleep(0.05)
        release.set()
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    assert sorted(s for s, _ in results) == [200, 200, 429]
    assert next(h for s, h in results if s == 429)[b"retry-after"] == b"1"
    assert guard.chats == 0


def test_progress_and_health_answer_while_every_worker_thread_is_busy(tiny_base, tmp_path, monkeypatch):
    app, sampler, _ = app_with(tiny_base, tmp_path)
    blocked = Future()
    monkeypatch.setattr(sampler, "submit", lambda request: blocked)
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        client.portal.call(lambda: setattr(anyio.to_thread.current_default_thread_limiter(), "total_tokens", 1))
        def ask():
            try:
                client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
            except RuntimeError:
                pass  # released with an error at the end

        chat = threading.Thread(target=ask)
        chat.start()
        try:
            for _ in range(100):  # the chat request holds the only worker thread
                if client.portal.call(lambda: anyio.to_thread.current_default_thread_limiter().borrowed_tokens) == 1:
                    break
                threading.Event().wait(0.02)
            answered = []
            t = threading.Thread(target=lambda: answered.append(client.get("/train/progress/policy").status_code))
            t.start()
            t.join(timeout=5)
            assert answered == [200]
            assert client.get("/health").json() == {"ok": True}
        finally:
            blocked.set_exception(RuntimeError("test over"))
            chat.join(timeout=10)


def test_the_bounds_are_validated_flags(monkeypatch):
    from evalrl_trainer.server import main

    monkeypatch.setenv("EVALRL_MODEL_SERVER_TOKEN", TOKEN)
    for flags in (["--max-concurrent-chats", "5000"], ["--max-concurrent-chats", "0"], ["--max-queued-samples", "0"]):
        with pytest.raises(SystemExit):
            main([*flags, "--model", "/nonexistent"])
