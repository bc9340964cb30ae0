"""evalrl's model server: sampling with LoRA adapters and GRPO LoRA training steps."""
