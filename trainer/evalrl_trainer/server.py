"""The model server: OpenAI-compatible sampling with LoRA adapters, vLLM-style adapter loading, GRPO steps.

    python -m evalrl_trainer.server --model PATH [--checkpoints DIR] [--host 127.0.0.1] [--port 8000]
        [--mode throughput|deterministic] [--max-batch 8]

A token in EVALRL_MODEL_SERVER_TOKEN makes every request need `Authorization: Bearer <token>`; without one the
server refuses to bind anything but loopback.
"""
import argparse
import ctypes
import ctypes.util
import hashlib
import ipaddress
import math
import os
import sys
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import anyio.to_thread
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from .adapters import NAME, Adapters, AdapterError
from .base_model import compile_decoder_layers, load_base_model, smollm2_gguf
from .chat import render_prompt
from .grpo import LossConfig
from .guard import Guard, allowed_hosts
from .limits import Limits, add_limit_flags, limits_from_flags
from .lora import LoraSettings
from .sampler import Mode, SampleRequest, Sampler
from .staging import IncompleteUpload, Staging
from .tool_calls import parse_tool_calls
from .train_step import Sequence as TrainSequence
from .train_step import StepConfig
from .trainer import Cancelled, StepBusy, StepConflict, Trainer


# --- request schemas (validated at the edge; errors name the field) -----------------------------------------
class ChatRequest(BaseModel):
    model: str = "base"
    messages: list[dict] = Field(min_length=1)
    tools: list[dict] | None = None
    temperature: float = Field(1.0, ge=0, le=2)  # vLLM's bound
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1)  # vLLM's: 0 or -1 keeps every token
    min_p: float = Field(0.0, ge=0, le=1)
    # Accepted as vLLM takes it, but only its neutral value: this server samples without penalties.
    repetition_penalty: float = Field(1.0, ge=1, le=1)
    max_tokens: int = Field(256, ge=1, le=32768)
    n: int = Field(1, ge=1, le=64)
    seed: int | None = Field(None, ge=0, lt=2**63)
    stop: str | list[str] | None = None  # at most 4 strings (OpenAI's and vLLM's bound), each of at most 256 characters
    logprobs: bool = False
    ignore_eos: bool = False  # vLLM's extension: always sample max_tokens (benchmarks)
    return_token_ids: bool = False  # vLLM's extension; token ids come back whatever it says
    chat_template_kwargs: dict | None = None  # vLLM's: variables for the chat template (Qwen3's enable_thinking)

    @field_validator("messages")
    @classmethod
    def roles(cls, messages: list[dict]) -> list[dict]:
        for i, m in enumerate(messages):
            if m.get("role") not in ("system", "user", "assistant", "tool"):
                raise ValueError(f"message {i} has role {m.get('role')!r}; expected system, user, assistant or tool")
        return messages

    @field_validator("stop")
    @classmethod
    def bounded_stop(cls, stop: str | list[str] | None):
        strings = [stop] if isinstance(stop, str) else (stop or [])
        if len(strings) > 4:
            raise ValueError(f"{len(strings)} stop strings; at most 4")
        if any(len(x) > 256 for x in strings):
            raise ValueError("a stop string is longer than 256 characters")
        return stop


class Sequence(BaseModel):
    token_ids: list[int] = Field(min_length=2)
    mask: list[int]
    logprobs: list[float]
    advantage: float

    @model_validator(mode="after")
    def shapes(self):
        n = len(self.token_ids)
        if len(self.mask) != n or len(self.logprobs) != n:
            raise ValueError(f"token_ids, mask and logprobs must have one entry per token ({n})")
        if not math.isfinite(self.advantage):
            raise ValueError("advantage must be a finite number")
        if any(not math.isfinite(x) for x in self.logprobs):
            raise ValueError("logprobs must be finite numbers")
        if not any(self.mask):
            raise ValueError("mask marks no produced token")
        return self


class Hyperparameters(BaseModel):
    """A stage's training hyperparameters. Wire names, defaults and bounds are the TypeScript schema's
    (src/hyperparameters.ts, exported to hyperparameters.schema.json; tests/test_contract.py compares them)."""

    model_config = ConfigDict(extra="forbid")
    learning_rate: float = Field(1e-5, gt=0, le=1)
    clip_low: float = Field(0.2, ge=0, le=1)
    clip_high: float = Field(0.28, ge=0, le=10)
    kl_coef: float = Field(0.0, ge=0, le=10)
    max_grad_norm: float = Field(1.0, gt=0, le=1000)
    loss_aggregation: Literal["token-mean", "dr-grpo"] = "token-mean"
    tis_imp_ratio_cap: float = Field(0.0, ge=0, le=100)  # truncated importance sampling's cap; 0: off


class TokenizeRequest(BaseModel):
    model: str = "base"
    prompt: str | None = None
    messages: list[dict] | None = None
    tools: list[dict] | None = None
    add_generation_prompt: bool = True  # vLLM's parameter
    chat_template_kwargs: dict | None = None  # vLLM's parameter


class Lora(BaseModel):
    rank: int = Field(16, ge=1, le=512)
    alpha: int = Field(32, ge=1)
    init_seed: str | None = Field(None, max_length=200)  # seeds a new adapter's weights instead of its name
    init_from: str | None = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}@step-\d+$")  # or starts it from a checkpoint


class Upload(BaseModel):
    """A step's sequences sent in chunks (POST /train/step/chunk), staged under the whole request's digest."""
    id: str = Field(pattern=r"^[0-9a-f]{64}$")  # SHA-256 of the whole request, as the client computed it
    chunks: int = Field(ge=1)


class TrainStepChunk(BaseModel):
    adapter: str = Field(pattern=NAME.pattern)
    step: int = Field(ge=1)
    upload: Upload
    index: int = Field(ge=0)
    sequences: list[Sequence] = Field(min_length=1)


SEQUENCES = TypeAdapter(list[Sequence])  # a staged chunk's stored form


class TrainStepRequest(BaseModel):
    adapter: str = Field(pattern=NAME.pattern)
    step: int = Field(ge=1)
    sequences: list[Sequence] = Field(default_factory=list, min_length=1)  # or, staged in chunks, `upload`
    # "sft": a warm start on demonstrations (advantage-weighted log-likelihood); GRPO otherwise.
    objective: Literal["grpo", "sft"] = "grpo"
    hyperparameters: Hyperparameters = Hyperparameters()
    lora: Lora = Lora()
    keep_checkpoints: int | None = Field(None, ge=0)  # newest N steps kept for this adapter (0: all)
    upload: Upload | None = None


class LoadAdapter(BaseModel):
    """vLLM's LoadLoRAAdapterRequest (read in vLLM 0.33.0, serve/lora/protocol.py; 0.10.2-0.14 have the first two fields only)."""
    lora_name: str
    lora_path: str
    load_inplace: bool = False  # without it vLLM refuses a name it already holds
    is_3d_lora_weight: bool = False  # accepted as vLLM accepts it; a PEFT folder here needs no such flag


class UnloadAdapter(BaseModel):
    """vLLM's UnloadLoRAAdapterRequest."""
    lora_name: str
    lora_int_id: int | None = None


class ProbeRequest(BaseModel):
    rank: int = Field(16, ge=1, le=512)


class AdapterRef(BaseModel):
    adapter: str


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "code": status}})


SPARE_THREADS = 8  # worker threads beyond the chats: progress, tokenize, adapter loads, training


def create_app(
    adapters: Adapters, sampler: Sampler, trainer: Trainer, token: str | None, limits: Limits = Limits(),
    hosts: set[str] | None = None,
) -> FastAPI:
    @asynccontextmanager
    async def worker_threads(_app: FastAPI):
        # A chat request waits on a worker thread for its samples: the pool holds every chat allowed at once,
        # and progress, tokenize and training keep threads of their own beside them.
        anyio.to_thread.current_default_thread_limiter().total_tokens = limits.concurrent_chats + SPARE_THREADS
        yield

    app = FastAPI(title="evalrl model server", lifespan=worker_threads)
    base = adapters.base
    staging = Staging(adapters.root)
    # Host allowlist, token, body cap (counted as it streams) and concurrent chats: guard.py.
    app.add_middleware(Guard, token=token, limits=limits, hosts=hosts, max_chat=limits.concurrent_chats)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"] if x != "body")
        return error(400, f"{field}: {first['msg']}")

    @app.exception_handler(AdapterError)
    async def bad_adapter(_request: Request, exc: AdapterError):
        return error(404 if "unknown" in str(exc) or "no checkpoint" in str(exc) else 400, str(exc))

    @app.get("/health")
    async def health():  # no token needed, no worker thread, nothing beyond ok
        return {"ok": True}

    @app.get("/usage")
    async def usage():  # the counters that /health gave before (issue 47): behind the token
        cache = sampler.cache
        return {"ok": True, "mode": sampler.mode, "device": str(base.device), "adapters": adapters.trained,
                "prefix_cache": {"entries": len(cache.entries), "mb": round(cache.used / 2**20, 1), "hit_tokens": cache.hits, "computed_tokens": cache.misses},
                "sampling": {k: round(v, 1) for k, v in sampler.usage.items()}}  # fmt: skip

    @app.get("/v1/models")
    def models():
        # A trained adapter also under its current step's address: what a sampling pool routes by.
        names = ["base", *adapters.names(), *(f"{name}@step-{step}" for name, step in sorted(adapters.trained.items()))]
        return {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "evalrl"} for n in names]}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest):
        adapter = adapters.resolve(req.model)
        prompt_ids = render_prompt(base.tokenizer, req.messages, req.tools, chat_template_kwargs=req.chat_template_kwargs)
        if len(prompt_ids) + req.max_tokens > base.max_context:
            return error(
                400,
                f"max_tokens: prompt ({len(prompt_ids)} tokens) + max_tokens ({req.max_tokens}) exceeds the "
                f"model's context of {base.max_context} tokens",
            )
        stop = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
        if sampler.queue.qsize() + req.n > limits.queued_samples:
            return JSONResponse(status_code=429, headers={"Retry-After": "1"}, content={"error": {
                "message": f"{sampler.queue.qsize()} samples are queued (--max-queued-samples {limits.queued_samples}): retry later",
                "code": 429}})  # fmt: skip
        futures = [
            sampler.submit(SampleRequest(
                prompt_ids, adapter, req.max_tokens, req.temperature, req.top_p, req.top_k, req.min_p,
                None if req.seed is None else req.seed + i, stop, req.ignore_eos,
            ))  # fmt: skip
            for i in range(req.n)
        ]
        choices = []
        completion_tokens = 0
        for i, future in enumerate(futures):
            sample = future.result()
            completion_tokens += len(sample.token_ids)
            content, tool_calls = parse_tool_calls(sample.text, req.tools) if req.tools else (sample.text, [])
            message = {"role": "assistant", "content": content}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {
                "index": i,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else sample.finish_reason,
                "token_ids": sample.token_ids,
                "token_logprobs": sample.logprobs,
            }
            if req.logprobs:
                tokens = base.tokenizer.convert_ids_to_tokens(sample.token_ids)
                choice["logprobs"] = {"content": [{"token": t, "logprob": lp} for t, lp in zip(tokens, sample.logprobs)]}
            choices.append(choice)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model,
            "prompt_token_ids": prompt_ids,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt_ids) * req.n + completion_tokens,
            },
        }

    @app.post("/tokenize")
    def tokenize(req: TokenizeRequest):
        """vLLM's endpoint: the token ids of a chat prompt as the chat endpoint renders it, or of raw text."""
        if req.messages is not None:
            tokens = render_prompt(base.tokenizer, req.messages, req.tools, req.add_generation_prompt, req.chat_template_kwargs)
        elif req.prompt is not None:
            tokens = base.tokenizer.encode(req.prompt, add_special_tokens=False)
        else:
            return error(400, "prompt: give either prompt or messages")
        # eos_token_ids (beyond vLLM's reply): where a sampled turn ends, so demonstrations end alike.
        return {"tokens": tokens, "count": len(tokens), "max_model_len": base.max_context, "eos_token_ids": sampler.eos_ids}

    # vLLM's replies, word for word: plain text on success, its refusals with its statuses.
    @app.post("/v1/load_lora_adapter")
    def load_adapter(req: LoadAdapter):
        if req.lora_name in adapters.loaded and not req.load_inplace:
            return error(400, f"The lora adapter '{req.lora_name}' has already been loaded. If you want to load the "
                              "adapter in place, set 'load_inplace' to True.")  # fmt: skip
        adapters.load_external(req.lora_name, Path(req.lora_path))
        return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    def unload_adapter(req: UnloadAdapter):
        if req.lora_name not in adapters.loaded:
            return error(404, f"The lora adapter '{req.lora_name}' cannot be found.")
        adapters.unload(req.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")

    def refusal(sequences: list[Sequence]) -> str | None:
        """Why sequences (a step, or a chunk of one) are beyond this server's limits or its model."""
        lengths = [len(s.token_ids) for s in sequences]
        if problem := limits.step_refusal(lengths):
            return problem
        if max(lengths) > base.max_context:
            return f"sequences: a sequence of {max(lengths)} tokens exceeds the context of {base.max_context}"
        vocab = base.model.config.vocab_size
        if any(t < 0 or t >= vocab for s in sequences for t in s.token_ids):
            return f"sequences.token_ids: ids must be in [0, {vocab})"
        return None

    @app.post("/train/step/chunk")
    def train_chunk(req: TrainStepChunk):
        """Stages one chunk of a step too large for one request; POST /train/step with `upload` trains the step."""
        if req.index >= req.upload.chunks:
            return error(400, f"index: {req.index} is not one of the upload's {req.upload.chunks} chunks")
        if problem := refusal(req.sequences):
            return error(400, problem)
        staging.put(req.adapter, req.step, req.upload.id, req.index, req.upload.chunks, SEQUENCES.dump_json(req.sequences))
        return {"staged": req.index, "chunks": req.upload.chunks}

    @app.post("/train/step")
    def train(req: TrainStepRequest):
        if bool(req.sequences) == (req.upload is not None):
            return error(400, "sequences: give the step's sequences, or `upload` naming their staged chunks (one of the two)")
        if req.upload is not None:
            try:
                chunks = staging.read(req.adapter, req.step, req.upload.id, req.upload.chunks)
                req = req.model_copy(update={"sequences": [s for chunk in chunks for s in SEQUENCES.validate_json(chunk)]})
            except IncompleteUpload as err:
                return error(409, str(err))
            finally:
                staging.drop(req.adapter, req.step, req.upload.id)  # spent once asked for: a retry stages them again
        if problem := refusal(req.sequences):
            return error(400, problem)
        h = req.hyperparameters
        loss = LossConfig(clip_low=h.clip_low, clip_high=h.clip_high, kl_coef=h.kl_coef, aggregation=h.loss_aggregation,
                          objective=req.objective, tis_imp_ratio_cap=h.tis_imp_ratio_cap)  # fmt: skip
        cfg = StepConfig(learning_rate=h.learning_rate, max_grad_norm=h.max_grad_norm, loss=loss, tokens_per_micro_batch=trainer.tokens_per_micro_batch)
        sequences = [TrainSequence(s.token_ids, s.mask, s.logprobs, s.advantage) for s in req.sequences]  # shared, not copied
        lora = LoraSettings(rank=req.lora.rank, alpha=req.lora.alpha, init_seed=req.lora.init_seed, init_from=req.lora.init_from)
        # Over every sequence however they came (whole or staged): a retry gets the stored result, another request 409.
        digest = hashlib.sha256(req.model_dump_json(exclude={"keep_checkpoints", "upload"}).encode()).hexdigest()
        try:
            return trainer.step(req.adapter, req.step, sequences, cfg, lora, req.keep_checkpoints, digest)
        except StepConflict as err:
            return error(409, str(err))
        except (Cancelled, StepBusy) as err:  # retryable: a cancel, or another host training the step (its lease)
            return error(503, str(err))
        except FloatingPointError as err:
            return error(422, str(err))

    @app.post("/checkpoints/probe")
    def probe(req: ProbeRequest):
        """A probe adapter of the run's LoRA rank under the checkpoint root, for a preflight to load on every
        sampling host: it proves the host mounts this root at the same path and accepts the rank."""
        return {"path": str(adapters.write_probe(req.rank).resolve())}

    @app.get("/train/progress/{adapter}")
    async def progress(adapter: str):  # reads state only: answers while every worker thread is busy
        return trainer.progress(adapter)

    @app.post("/train/cancel")
    def cancel(req: AdapterRef):
        return {"cancelled": trainer.cancel(req.adapter)}

    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def use_lean_allocator(argv: list[str] | None) -> None:
    """Training frees and reallocates activation buffers all the time; glibc's malloc keeps what was freed, so
    a 4 × 1,024-token step held 5.4 GB. With jemalloc (Debian's libjemalloc2, which `make setup` installs) it
    holds 2.7 GB and runs faster. The server re-executes itself with jemalloc preloaded when it is available;
    otherwise large allocations get their own mappings (returned when freed: bounded, about 25 % slower)."""
    if not sys.platform.startswith("linux") or "jemalloc" in os.environ.get("LD_PRELOAD", ""):
        return
    jemalloc = ctypes.util.find_library("jemalloc")
    if jemalloc and os.environ.get("EVALRL_NO_JEMALLOC") != "1":
        env = {**os.environ, "LD_PRELOAD": " ".join(filter(None, [os.environ.get("LD_PRELOAD"), jemalloc]))}
        os.execve(sys.executable, [sys.executable, "-m", "evalrl_trainer.server", *(sys.argv[1:] if argv is None else argv)], env)
    ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 1 << 20)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="HF model folder or .gguf file (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--checkpoints", default=".evalrl/checkpoints", help="checkpoint root")
    parser.add_argument("--cache", default=None, help="where converted GGUF models go (default: under --checkpoints)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--mode", choices=["throughput", "deterministic"], default="throughput")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--keep-checkpoints", type=int, default=5,
                        help="keep each adapter's newest N steps and step 0, unless a request says (0: all)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of new adapters' initial weights")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--compile", action="store_true", help="torch.compile the decoder layers (GPU training)")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                        help="base model dtype (auto: bf16 on a GPU or a CPU with AMX, else fp32)")  # fmt: skip
    parser.add_argument("--micro-batch-tokens", type=int, default=None,
                        help="padded tokens per training micro-batch: bounds training memory (default: 1024 on CPU, 16384 on GPU)")  # fmt: skip
    add_limit_flags(parser)
    parser.add_argument("--allowed-hosts", default="", help="comma-separated Host names accepted beside loopback and --host")
    parser.add_argument("--prefix-cache-mb", type=int, default=None,
                        help="keys/values of recent prompts kept for reuse (default: 256 on CPU, 8192 on GPU; 0: off)")  # fmt: skip
    args = parser.parse_args(argv)
    token = os.environ.get("EVALRL_MODEL_SERVER_TOKEN") or None
    if not is_loopback(args.host) and not token:
        parser.error(f"--host {args.host} is not loopback: set EVALRL_MODEL_SERVER_TOKEN to serve beyond this machine")
    use_lean_allocator(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    root = Path(args.checkpoints)
    root.mkdir(parents=True, exist_ok=True)
    model_path = Path(args.model) if args.model else smollm2_gguf()
    base = load_base_model(model_path, Path(args.cache) if args.cache else root / ".models", dtype=args.dtype)
    if args.compile:
        compile_decoder_layers(base.model)
    adapters = Adapters(base, root, seed=args.seed)
    resumed = adapters.resume_all()
    mode: Mode = args.mode
    prefix_cache_mb = args.prefix_cache_mb if args.prefix_cache_mb is not None else (8192 if base.device.type == "cuda" else 256)
    sampler = Sampler(adapters, mode=mode, max_batch=args.max_batch, prefix_cache_mb=prefix_cache_mb)
    tokens_per_micro_batch = args.micro_batch_tokens or (16384 if base.device.type == "cuda" else 1024)
    trainer = Trainer(adapters, args.keep_checkpoints, tokens_per_micro_batch)
    hosts = allowed_hosts(args.host, [h.strip() for h in args.allowed_hosts.split(",") if h.strip()])
    app = create_app(adapters, sampler, trainer, token, limits_from_flags(args), hosts)
    dtype = next(base.model.parameters()).dtype
    print(f"evalrl model server: {model_path.name} on {base.device} ({dtype}), mode {mode}, resumed {resumed or 'nothing'}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
