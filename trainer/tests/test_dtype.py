import torch

from evalrl_trainer import base_model
from evalrl_trainer.base_model import model_dtype


def test_the_base_model_dtype_follows_the_request_else_the_device():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert model_dtype(cpu, "float32") == torch.float32 and model_dtype(gpu, "float32") == torch.float32
    assert model_dtype(cpu, "bfloat16") == torch.bfloat16
    assert model_dtype(gpu) == torch.bfloat16
    assert model_dtype(cpu) == torch.float32  # a bf16-trained tiny judge lost its verdict protocol on the CPU


def test_a_bf16_base_model_keeps_its_adapter_and_logprobs_in_fp32(tiny_model_folder, tmp_path):
    from evalrl_trainer.lora import LoraSettings, with_lora
    from evalrl_trainer.logprobs import token_logprobs

    base = base_model.load_base_model(tiny_model_folder, tmp_path, device="cpu", dtype="bfloat16")
    model = with_lora(base.model, LoraSettings(rank=4, alpha=8))
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}
    logp, _ = token_logprobs(model, torch.tensor([[1, 2, 3, 4]]))
    assert logp.dtype == torch.float32 and torch.isfinite(logp).all()
