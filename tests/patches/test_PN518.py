"""PN518: INCConfig warns about FP8 layers in a hybrid INT4 + FP8 AutoRound checkpoint.

A tiny local checkpoint (one safetensors file) stands in for the model directory; the
config and the metadata reader are vLLM's own. The module logger is wrapped to record
warnings.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

AUTOROUND = {"bits": 4, "group_size": 128, "sym": True, "packing_format": "auto_round:auto_gptq"}


def _checkpoint(path, with_fp8: bool):
    tensors = {
        "model.layers.0.mlp.experts.0.up_proj.qweight": torch.zeros(4, 8, dtype=torch.int32),
        "model.layers.0.mlp.experts.0.up_proj.scales": torch.ones(1, 8, dtype=torch.float16),
        "model.embed_tokens.weight": torch.zeros(8, 8, dtype=torch.bfloat16),
    }
    if with_fp8:
        tensors["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(8, 8).to(torch.float8_e4m3fn)
        tensors["model.layers.0.self_attn.q_proj.weight_scale_inv"] = torch.ones(1, 1)
        tensors["model.layers.0.self_attn.o_proj.weight_scale_inv"] = torch.ones(1, 1)
    safetensors_torch.save_file(tensors, str(path / "model.safetensors"))
    return str(path)


@pytest.fixture
def inc(monkeypatch):
    from vllm.model_executor.layers.quantization.inc import inc as module

    warnings: list[str] = []
    real = module.logger.warning

    def record(msg, *args, **kwargs):
        warnings.append(msg % args)
        return real(msg, *args, **kwargs)

    monkeypatch.setattr(module.logger, "warning", record)
    return module, warnings


def test_fixed_hybrid_checkpoint_is_reported(inc, switch, tmp_path):
    switch("PN518", True)
    module, warnings = inc
    config = module.INCConfig.from_config(AUTOROUND)
    config.maybe_update_config(_checkpoint(tmp_path, with_fp8=True))
    assert config.unsupported_fp8_layers == [
        "model.layers.0.self_attn.o_proj",
        "model.layers.0.self_attn.q_proj",
    ]
    assert len(warnings) == 1
    assert "FP8" in warnings[0] and "model.layers.0.self_attn.q_proj" in warnings[0]


def test_on_plain_int4_checkpoint_is_quiet(inc, switch, tmp_path):
    switch("PN518", True)
    module, warnings = inc
    config = module.INCConfig.from_config(AUTOROUND)
    config.maybe_update_config(_checkpoint(tmp_path, with_fp8=False))
    assert config.unsupported_fp8_layers == []
    assert warnings == []


def test_off_no_check_as_upstream(inc, switch, tmp_path):
    switch("PN518", False)
    module, warnings = inc
    config = module.INCConfig.from_config(AUTOROUND)
    assert config.maybe_update_config(_checkpoint(tmp_path, with_fp8=True)) is None
    assert not hasattr(config, "unsupported_fp8_layers")
    assert warnings == []
