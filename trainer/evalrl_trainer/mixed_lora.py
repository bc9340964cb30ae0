"""Decoding batches whose rows use different adapters (two runs' policies, a policy beside its judge).

PEFT's own path (`adapter_names=`) registers a hook on every LoRA layer at each forward call and splits the
rows with Python lists inside every layer: on 2 CPU cores a decoding step of batch 8 with two adapters costs
1.3–1.5× a step with one (bench/decode). Here each LoRA layer gets one forward hook, once; while a mixed batch
runs, the base model runs with adapters disabled and the hook adds each row's own adapter to the layer's
output (the same arithmetic as PEFT's, row group by row group). Outside a mixed batch the hook does nothing.
"""
from contextlib import contextmanager

import torch
from peft import PeftModel
from peft.tuners.lora.layer import Linear as LoraLinear
from peft.tuners.lora.layer import LoraLayer


class MixedLora:
    def __init__(self):
        self.groups: list[tuple[str, torch.Tensor]] | None = None  # (adapter, its rows) while a mixed batch runs
        self.hooked: set[int] = set()

    @staticmethod
    def supports(peft: PeftModel) -> bool:
        """Plain LoRA on linear layers only (no DoRA or other variants, no LoRA on embeddings): else PEFT's path."""
        return all(isinstance(m, LoraLinear) and not m.lora_variant for m in peft.modules() if isinstance(m, LoraLayer))

    @contextmanager
    def rows(self, peft: PeftModel, adapters: list[str | None]):
        """Runs the model's forward passes with row i through adapters[i] (None: the base model)."""
        for module in peft.modules():  # a new adapter's target modules may be new LoRA layers
            if isinstance(module, LoraLinear) and id(module) not in self.hooked:
                module.register_forward_hook(self._add_lora)
                self.hooked.add(id(module))
        groups: dict[str, list[int]] = {}
        for row, adapter in enumerate(adapters):
            if adapter is not None:
                groups.setdefault(adapter, []).append(row)
        self.groups = [(adapter, torch.tensor(rows)) for adapter, rows in groups.items()]
        try:
            with peft.disable_adapter():
                yield
        finally:
            self.groups = None

    def _add_lora(self, module: LoraLinear, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        if self.groups is None:
            return None
        x = args[0]
        for adapter, rows in self.groups:
            if adapter in module.lora_A:  # an adapter that does not target this layer adds nothing to it
                lora_a = module.lora_A[adapter]
                lora = module.lora_B[adapter](lora_a(module.lora_dropout[adapter](x[rows].to(lora_a.weight.dtype))))
                output[rows] += (lora * module.scaling[adapter]).to(output.dtype)
        return output
