"""The server's hyperparameters are the TypeScript schema's: same names, defaults and bounds.

trainer/hyperparameters.schema.json is exported from src/hyperparameters.ts (a jest test keeps it equal to
the zod schema); this compares the pydantic model with it, so a value one side accepts the other accepts too.
"""
import json
from pathlib import Path

from evalrl_trainer.server import Hyperparameters

KEYS = ("type", "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum")


def test_pydantic_hyperparameters_match_the_exported_schema():
    exported = json.loads((Path(__file__).resolve().parents[1] / "hyperparameters.schema.json").read_text())
    ours = Hyperparameters.model_json_schema()
    assert list(ours["properties"]) == list(exported["properties"])
    for name, spec in exported["properties"].items():
        mine = {k: v for k, v in ours["properties"][name].items() if k in KEYS}
        assert mine == {k: v for k, v in spec.items() if k in KEYS}, name
    assert ours.get("additionalProperties") is False and exported["additionalProperties"] is False
