"""LoRA adapters on a base causal LM (peft)."""
from dataclasses import dataclass

from peft import LoraConfig, get_peft_model


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"
    init_seed: str | None = None  # what a new adapter's initial weights derive from (default: its name)
    init_from: str | None = None  # or a checkpoint (`name@step-N`) whose weights and LoRA shape it starts from


def lora_config(settings: LoraSettings) -> LoraConfig:
    targets = settings.target_modules
    return LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        task_type="CAUSAL_LM",
    )


def with_lora(base_model, settings: LoraSettings = LoraSettings(), adapter: str = "default"):
    """Freezes the base model and adds one trainable LoRA adapter on its linear layers."""
    return get_peft_model(base_model, lora_config(settings), adapter_name=adapter)
