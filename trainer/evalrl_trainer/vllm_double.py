"""A wire-level double of vLLM's OpenAI-compatible server (the version in src/modelServer/vllmServe.ts), for tests
and for preflighting a deployment without a GPU. It takes `vllm serve`'s command line and answers as that vLLM
does; the tokens come from the model server's own engine (adapters.py, sampler.py) on a small model.

    python -m evalrl_trainer.vllm_double serve MODEL [vllm serve flags]    (API key: --api-key or VLLM_API_KEY)

Each behaviour cites the vLLM 0.33.0 source it copies (paths inside the vllm wheel, commit 4ba787ec9). Like vLLM
it keeps loaded LoRA adapters in memory only: a restart forgets every one. What it does not copy: the engine
(scheduling, batching, CUDA), streaming, the reasoning parsers, and errors of requests evalrl never sends.
"""
import argparse
import json
import os
import re
import tempfile
import time
import uuid
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict

from .adapters import Adapters
from .base_model import load_base_model
from .chat import render_as_vllm, vllm_prompt_text
from .sampler import SampleRequest, Sampler

VERSION = "0.33.0"
# vllm/engine/arg_utils.py: --max-lora-rank takes one of these.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# vllm/config/model.py get_diff_sampling_param: what --generation-config auto reads from generation_config.json.
GENERATION_CONFIG_FIELDS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")
# chat_completion/protocol.py to_sampling_params: the values when neither the request nor the server default says.
NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}


def error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    """vllm/entrypoints/serve/engine/protocol.py ErrorResponse: {"error": {message, type, param, code}}."""
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "param": param, "code": status}})


class ChatRequest(BaseModel):
    """The fields of vLLM's ChatCompletionRequest (entrypoints/openai/chat_completion/protocol.py) this double acts
    on; others are accepted and ignored, as serve/engine/protocol.py OpenAIBaseModel (extra="allow") does."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[dict]
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool = False
    return_token_ids: bool | None = None
    chat_template_kwargs: dict | None = None


class LoadLoRAAdapterRequest(BaseModel):
    lora_name: str
    lora_path: str
    load_inplace: bool = False


class UnloadLoRAAdapterRequest(BaseModel):
    lora_name: str
    lora_int_id: int | None = None


HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def hermes_tool_calls(text: str) -> tuple[str | None, list[dict]]:
    """vllm/tool_parsers/hermes_tool_parser.py Hermes2ProToolParser.extract_tool_calls: every `<tool_call>` block
    (the last may be unclosed) is JSON with name and arguments, re-serialised by json.dumps; the text before the
    first block stays content (None when blank, parser/abstract_parser.py); any block that fails leaves the whole
    text as content and no calls. Ids: renderers/chat_utils/tool_call.py make_tool_call_id."""
    if "<tool_call>" not in text:
        return text, []
    try:
        blocks = [json.loads(a or b) for a, b in HERMES_CALL.findall(text)]
        calls = [
            {"id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}", "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
            for c in blocks
        ]  # fmt: skip
    except Exception:  # as vLLM's parser: any failure (RecursionError on deep nesting too) leaves the text as content
        return text, []
    content = text[: text.find("<tool_call>")]
    return (content if content.strip() else None), calls


def generation_defaults(model: Path, mode: str) -> dict:
    """--generation-config auto (vLLM's default) reads the model's generation_config.json and fills any sampling
    field a request leaves out from it (vllm/config/model.py get_diff_sampling_param); `vllm` uses vLLM's own
    neutral defaults."""
    file = model / "generation_config.json"
    if mode != "auto" or not file.exists():
        return {}
    config = json.loads(file.read_text())
    defaults = {k: config[k] for k in GENERATION_CONFIG_FIELDS if k in config}
    if "max_new_tokens" in defaults:
        defaults["max_tokens"] = defaults.pop("max_new_tokens")
    return defaults


def create_app(args: argparse.Namespace, adapters: Adapters, sampler: Sampler, api_key: str | None) -> FastAPI:
    app = FastAPI(title="vLLM double")
    base = adapters.base
    served = args.served_model_name or [args.model]  # launchers/api_server/app_state.py: the path as given
    defaults = generation_defaults(Path(args.model), args.generation_config)
    max_model_len = args.max_model_len or base.max_context
    loras: dict[str, str] = {}  # lora_name → lora_path, in memory only (vllm/lora/request.py LoRARequest)
    runtime_lora = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("1", "true")
    created = int(time.time())

    @app.middleware("http")
    async def authenticate(request: Request, call_next):
        # serve/middleware/authenticate.py AuthenticationMiddleware: /v1 routes need the key; /health, /tokenize do not.
        if api_key and request.url.path.startswith("/v1") and request.headers.get("authorization") != f"Bearer {api_key}":
            return JSONResponse(status_code=401, content={"error": "Unauthorized"})
        return await call_next(request)

    def model_or_404(name: str | None) -> tuple[str | None, JSONResponse | None]:
        """serve/engine/serving.py _check_model: empty, a served base name, or a loaded LoRA's name; else a 404."""
        if not name or name in served:
            return None, None
        if name in loras:
            return name, None
        return None, error(404, f"The model `{name}` does not exist. Valid aliases: {', '.join(served)}.", "NotFoundError", "model")

    @app.get("/health")  # serve/instrumentator/health.py: 200, empty body
    def health():
        return PlainTextResponse("")

    @app.get("/version")  # serve/instrumentator/basic.py show_version
    def version():
        return {"version": VERSION}

    @app.get("/v1/models")  # openai/models/serving.py show_available_models
    def models():
        cards = [{"id": n, "object": "model", "created": created, "owned_by": "vllm", "root": args.model, "parent": None,
                  "max_model_len": max_model_len} for n in served]  # fmt: skip
        cards += [{"id": n, "object": "model", "created": created, "owned_by": "vllm", "root": p, "parent": served[0],
                   "max_model_len": None} for n, p in loras.items()]  # fmt: skip
        return {"object": "list", "data": cards}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest):
        adapter, missing = model_or_404(req.model)
        if missing:
            return missing
        if req.tools and req.tool_choice in (None, "auto") and not (args.enable_auto_tool_choice and args.tool_call_parser):
            # renderers/online_renderer.py OnlineRenderer.render_chat (tools without tool_choice mean "auto")
            return error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set', "BadRequestError")
        p = {k: getattr(req, k) if getattr(req, k) is not None else defaults.get(k, v) for k, v in NEUTRAL.items()}
        if refusal := sampling_refusal(req, p):
            return refusal
        prompt = render_as_vllm(base.tokenizer, req.messages, req.tools, req.chat_template_kwargs)
        if len(prompt) > max_model_len:  # renderers/params.py _token_len_check
            return error(400, f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
                              f"contains at least {len(prompt)} input tokens, which exceeds this limit even without any output "
                              f"tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value={len(prompt)})",
                         "BadRequestError", "input_tokens")  # fmt: skip
        asked = req.max_completion_tokens or req.max_tokens or defaults.get("max_tokens") or max_model_len
        if asked > max_model_len:  # renderers/params.py TokenizeParams.__post_init__
            return error(400, f"max_tokens={asked} cannot be greater than max_model_len={max_model_len}. Please request "
                              f"fewer output tokens. (parameter=max_tokens, value={asked})", "BadRequestError", "max_tokens")  # fmt: skip
        # serve/utils/api_utils.py get_max_tokens: what does not fit is clamped, not refused (finish_reason "length")
        max_tokens = min(asked, max_model_len - len(prompt))
        if max_tokens < 1:
            return error(400, f"max_tokens must be at least 1, got {max_tokens}. (parameter=max_tokens, value={max_tokens})", "BadRequestError", "max_tokens")
        stop = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
        futures = [
            sampler.submit(SampleRequest(prompt, adapter, max_tokens, p["temperature"], p["top_p"], max(p["top_k"], 0),
                                         p["min_p"], None if req.seed is None else req.seed + i, stop))
            for i in range(req.n)
        ]  # fmt: skip
        choices = [choice(i, f.result(), req, bool(args.tool_call_parser), base.tokenizer) for i, f in enumerate(futures)]
        completion = sum(len(c["token_ids"]) for c in choices)
        for c in choices:  # chat_completion/serving.py: token ids only with return_token_ids
            c["token_ids"] = c["token_ids"] if req.return_token_ids else None
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
            "model": req.model or served[0], "choices": choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion},
            "prompt_token_ids": prompt if req.return_token_ids else None,
        }  # fmt: skip

    @app.post("/tokenize")  # serve/tokenize/serving.py create_tokenize
    def tokenize(body: dict):
        if "messages" in body:  # chat form: add_special_tokens defaults to False, add_generation_prompt to True
            text = vllm_prompt_text(base.tokenizer, body["messages"], body.get("tools"), body.get("chat_template_kwargs"),
                                    body.get("add_generation_prompt", True))  # fmt: skip
            tokens = base.tokenizer.encode(text, add_special_tokens=body.get("add_special_tokens", False))
        else:  # completion form: add_special_tokens defaults to True
            tokens = base.tokenizer.encode(body.get("prompt", ""), add_special_tokens=body.get("add_special_tokens", True))
        return {"count": len(tokens), "max_model_len": max_model_len, "tokens": tokens, "token_strs": None}

    if runtime_lora:
        # serve/lora/api_router.py registers these only with VLLM_ALLOW_RUNTIME_LORA_UPDATING; the replies and
        # refusals are openai/models/serving.py's (load_lora_adapter, _check_load/_unload_lora_adapter_request).
        @app.post("/v1/load_lora_adapter")
        def load(req: LoadLoRAAdapterRequest):
            if req.lora_name in served:
                return error(400, f"The lora adapter '{req.lora_name}' conflicts with a served base model.", "InvalidUserInput")
            if req.lora_name in loras and not req.load_inplace:
                return error(400, f"The lora adapter '{req.lora_name}' has already been loaded. If you want to load "
                                  "the adapter in place, set 'load_inplace' to True.", "InvalidUserInput")  # fmt: skip
            path = Path(req.lora_path)
            config = path / "adapter_config.json"
            if not config.exists():  # lora/worker_manager.py _load_adapter → LoRAAdapterNotFoundError (path sanitised)
                return error(404, f"Loading lora {req.lora_name} failed: No adapter found for <path>", "NotFoundError")
            if not args.enable_lora:  # v1/worker/lora_model_runner_mixin.py _ensure_lora_enabled, via the engine core
                return error(500, "Call to add_lora method failed: LoRA is not enabled. Use --enable-lora to enable LoRA.", "InternalServerError")
            rank = json.loads(config.read_text()).get("r", 0)
            if rank > args.max_lora_rank:  # lora/peft_helper.py validate_legal, via the engine core
                return error(500, f"Call to add_lora method failed: LoRA rank {rank} is greater than max_lora_rank {args.max_lora_rank}.", "InternalServerError")
            adapters.load_external(req.lora_name, path, anywhere=True)
            loras[req.lora_name] = req.lora_path
            return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' added successfully.")

        @app.post("/v1/unload_lora_adapter")
        def unload(req: UnloadLoRAAdapterRequest):
            if req.lora_name not in loras:
                return error(404, f"The lora adapter '{req.lora_name}' cannot be found.", "NotFoundError")
            adapters.unload(req.lora_name)
            del loras[req.lora_name]
            return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")

    return app


def choice(index: int, sample, req: ChatRequest, parse_tools: bool, tokenizer) -> dict:
    """One choice as chat_completion/serving.py chat_completion_full_generator builds it: `tool_calls` only when
    there are calls (protocol.py ChatMessage), logprobs in OpenAI's shape, raw (--logprobs-mode raw_logprobs)."""
    content, calls = hermes_tool_calls(sample.text) if parse_tools and req.tools else (sample.text, [])
    message = {"role": "assistant", "content": content, "reasoning": None, **({"tool_calls": calls} if calls else {})}
    logprobs = None
    if req.logprobs:
        tokens = tokenizer.convert_ids_to_tokens(sample.token_ids)
        logprobs = {"content": [{"token": t, "logprob": max(lp, -9999.0), "bytes": list(t.encode()), "top_logprobs": []}
                                for t, lp in zip(tokens, sample.logprobs)]}  # fmt: skip
    finish = "tool_calls" if calls and sample.finish_reason == "stop" else sample.finish_reason
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish, "token_ids": sample.token_ids}


def sampling_refusal(req: ChatRequest, p: dict) -> JSONResponse | None:
    """sampling_params.py SamplingParams._verify_args and __post_init__, and the request's own checks, for the
    fields evalrl sends."""
    problems = [
        (not 0 <= p["temperature"] <= 2, f"temperature must be in [0, 2], got {p['temperature']}. (parameter=temperature, value={p['temperature']})"),
        (not 0 < p["top_p"] <= 1, f"top_p must be in (0, 1], got {p['top_p']}. (parameter=top_p, value={p['top_p']})"),
        (p["top_k"] < -1, f"top_k must be 0 (disable), or at least 1, got {p['top_k']}."),
        (not 0 <= p["min_p"] <= 1, f"min_p must be in [0, 1], got {p['min_p']}."),
        (p["repetition_penalty"] <= 0, f"repetition_penalty must be greater than zero, got {p['repetition_penalty']}."),
        (p["temperature"] < 1e-5 and req.n > 1, f"n must be 1 when using greedy sampling, got {req.n}."),
        (isinstance(req.stop, list) and len(req.stop) > 4, "1 validation error:\n  stop: at most 4 stop strings"),
        (req.tools == [], "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely."),
    ]  # fmt: skip
    message = next((m for bad, m in problems if bad), None)
    if message:
        return error(400, message, "BadRequestError")
    if p["repetition_penalty"] != 1.0:  # not copied: the engine under the double samples without penalties
        return error(400, "repetition_penalty: the vLLM double samples without penalties", "BadRequestError")
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """`vllm serve`'s flags that a sampling host of evalrl uses (engine/arg_utils.py, entrypoints/common/cli_args.py);
    an unknown flag is refused, as vLLM refuses it."""
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--enable-auto-tool-choice", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument("--generation-config", default="auto")
    parser.add_argument("--enable-lora", action="store_true")
    parser.add_argument("--max-lora-rank", type=int, default=16)
    parser.add_argument("--max-loras", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=None)
    args = parser.parse_args(argv)
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        parser.error("Error: --enable-auto-tool-choice requires --tool-call-parser")  # common/cli_args.py validate_parsed_serve_args
    if args.max_lora_rank not in LORA_RANKS:
        parser.error(f"max_lora_rank ({args.max_lora_rank}) must be one of {LORA_RANKS}.")
    return args


def main(argv: list[str] | None = None):
    args = parse_args(argv)
    api_key = args.api_key or os.environ.get("VLLM_API_KEY") or None
    with tempfile.TemporaryDirectory(prefix="vllm-double-") as scratch:  # it trains nothing: no checkpoint root
        base = load_base_model(args.model, Path(scratch), device="cpu", dtype="float32")
        adapters = Adapters(base, Path(scratch))
        sampler = Sampler(adapters, mode=os.environ.get("EVALRL_DOUBLE_ENGINE", "deterministic"))
        app = create_app(args, adapters, sampler, api_key)
        print(f"vLLM double {VERSION}: {args.model} as {args.served_model_name or [args.model]}", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
