"""A tiny randomly initialised model with SmolLM2's architecture and tokenizer, for fast tests.

    python -m evalrl_trainer.tiny_model OUT_FOLDER [--init-range 0.2]
"""
import argparse
import os
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from .base_model import converted_folder, smollm2_gguf

MODELS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evalrl" / "models"


def smollm2_folder() -> Path:
    return converted_folder(smollm2_gguf(), MODELS_CACHE)


def build_tiny_model(out: Path, seed: int = 1234, init_range: float | None = None) -> Path:
    """`init_range` (default SmolLM2's 0.02) bounds how peaked its next-token distribution can get: at 0.02 the
    hidden-64 model's logits stay within about ±1.3, too flat for a LoRA adapter to teach it a format."""
    source = smollm2_folder()
    config = AutoConfig.from_pretrained(source)
    config.hidden_size, config.intermediate_size, config.num_hidden_layers = 64, 128, 2
    config.num_attention_heads, config.num_key_value_heads, config.head_dim = 4, 2, 16
    if init_range is not None:
        config.initializer_range = init_range
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    if config.pad_token_id is not None:
        # HF zeroes the padding token's embedding; tied to the output layer, that makes SmolLM2's pad token,
        # its end of turn, impossible to sample, and a taught adapter could never end a turn.
        with torch.no_grad():
            model.get_input_embeddings().weight[config.pad_token_id].normal_(0, config.initializer_range)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Build the tiny test model into OUT.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--init-range", type=float, default=None, help="std of the initial weights (default 0.02)")
    args = parser.parse_args()
    print(build_tiny_model(args.out, init_range=args.init_range))
