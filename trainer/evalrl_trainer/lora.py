"""LoRA adapters on a base causal LM (peft)."""
from dataclasses import dataclass

from peft import LoraConfig, get_peft_model


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"


def with_lora(base_model, settings: LoraSettings = LoraSettings(), adapter: str = "default"):
    """Freezes the base model and adds one trainable LoRA adapter on its linear layers."""
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules) if isinstance(settings.target_modules, tuple) else settings.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(base_model, config, adapter_name=adapter)
