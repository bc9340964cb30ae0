"""Fixtures: the real SmolLM2 (converted once per machine) and a tiny random model of its shape."""
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

from evalrl_trainer import tiny_model  # noqa: E402
from evalrl_trainer.base_model import load_base_model  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    return tiny_model.smollm2_folder()


@pytest.fixture(scope="session")
def tiny_model_folder(tmp_path_factory) -> Path:
    return tiny_model.build_tiny_model(tmp_path_factory.mktemp("tiny-smollm2"))


@pytest.fixture
def tiny_base(tiny_model_folder, tmp_path):
    return load_base_model(tiny_model_folder, tmp_path / "cache", device="cpu")
