"""A tiny randomly initialised model with a real model's architecture and tokenizer, for fast tests: SmolLM2's
(the embedded default) or Qwen3's (production), from tests/fixtures/qwen3.

    python -m evalrl_trainer.tiny_model OUT_FOLDER [--arch smollm2|qwen3] [--init-range 0.2]
"""
import argparse
import gzip
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PretrainedConfig, Qwen3Config

from .base_model import converted_folder, smollm2_gguf

MODELS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evalrl" / "models"
QWEN3_FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "qwen3"


def smollm2_folder() -> Path:
    return converted_folder(smollm2_gguf(), MODELS_CACHE)


def write_qwen3_tokenizer(out: Path) -> Path:
    """Qwen3's real tokenizer files into `out` (tokenizer.json is stored gzipped: 11 MB → 2 MB)."""
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(QWEN3_FIXTURE / "tokenizer.json.gz") as packed:
        (out / "tokenizer.json").write_bytes(packed.read())
    shutil.copyfile(QWEN3_FIXTURE / "tokenizer_config.json", out / "tokenizer_config.json")
    return out


# The tiny shape: 64 wide, 2 layers, 4 query and 2 key/value heads.
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def qwen3_config(**overrides) -> Qwen3Config:
    """Qwen3-4B's config.json apart from what `overrides` says: padded vocabulary, special ids, rope, norms, tied
    embeddings."""
    return Qwen3Config(**{
        "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645, **overrides,
    })  # fmt: skip


# Qwen3-4B's generation_config.json: a turn ends at <|im_end|> or <|endoftext|>; vLLM's --generation-config auto
# reads the sampling defaults.
QWEN3_GENERATION = GenerationConfig(
    bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=151643, do_sample=True, temperature=0.6,
    top_k=20, top_p=0.95,
)  # fmt: skip


def _random_model(config: PretrainedConfig, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    if config.pad_token_id is not None:
        # HF zeroes the padding token's embedding; tied to the output layer, that makes SmolLM2's pad token,
        # its end of turn, impossible to sample, and a taught adapter could never end a turn.
        with torch.no_grad():
            model.get_input_embeddings().weight[config.pad_token_id].normal_(0, config.initializer_range)
    return model


def build_tiny_model(out: Path, seed: int = 1234, init_range: float | None = None, arch: str = "smollm2") -> Path:
    """`init_range` (default 0.02, both architectures') bounds how peaked its next-token distribution can get: at
    0.02 the hidden-64 model's logits stay within about ±1.3, too flat for a LoRA adapter to teach it a format."""
    out.mkdir(parents=True, exist_ok=True)
    shape = TINY | ({} if init_range is None else {"initializer_range": init_range})
    if arch == "qwen3":
        model = _random_model(qwen3_config(**shape), seed)
        model.generation_config = QWEN3_GENERATION
        model.save_pretrained(out)
        write_qwen3_tokenizer(out)
        return out
    source = smollm2_folder()
    _random_model(AutoConfig.from_pretrained(source, **shape), seed).save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Build the tiny test model into OUT.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--arch", choices=["smollm2", "qwen3"], default="smollm2", help="whose architecture and tokenizer")
    parser.add_argument("--init-range", type=float, default=None, help="std of the initial weights (default 0.02)")
    args = parser.parse_args()
    print(build_tiny_model(args.out, init_range=args.init_range, arch=args.arch))
