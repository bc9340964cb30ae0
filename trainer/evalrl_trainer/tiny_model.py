"""A tiny randomly initialised model with SmolLM2's architecture and tokenizer, for fast tests.

    python -m evalrl_trainer.tiny_model OUT_FOLDER
"""
import os
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from .base_model import converted_folder, smollm2_gguf

MODELS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evalrl" / "models"


def smollm2_folder() -> Path:
    return converted_folder(smollm2_gguf(), MODELS_CACHE)


def build_tiny_model(out: Path, seed: int = 1234) -> Path:
    source = smollm2_folder()
    config = AutoConfig.from_pretrained(source)
    config.hidden_size, config.intermediate_size, config.num_hidden_layers = 64, 128, 2
    config.num_attention_heads, config.num_key_value_heads, config.head_dim = 4, 2, 16
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


if __name__ == "__main__":
    print(build_tiny_model(Path(sys.argv[1])))
