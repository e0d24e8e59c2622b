"""The runtime switch that ships with the built vLLM (kernels/vllm_genesis/runtime.py)."""

from __future__ import annotations

import sys

import pytest

from paths import REPO

sys.path.insert(0, str(REPO / "kernels"))

from vllm_genesis import runtime  # noqa: E402

OFF_BY_DEFAULT = "PN14"  # GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP
ON_BY_DEFAULT = "PN35"  # GENESIS_DISABLE_PN35_INPUTS_EMBEDS_OPTIONAL
ALWAYS_ON = "P15"  # no env flag


def test_registry_matches_the_headers() -> None:
    table = runtime.registry()
    assert table[OFF_BY_DEFAULT].env_flag == "GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP"
    assert table[OFF_BY_DEFAULT].default_on is False
    assert table[ON_BY_DEFAULT].default_on is True and table[ON_BY_DEFAULT].suffix == "PN35_INPUTS_EMBEDS_OPTIONAL"


@pytest.mark.parametrize("name", ["GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP", "SNDR_ENABLE_PN14_TQ_DECODE_OOB_CLAMP"])
@pytest.mark.parametrize("value,on", [("1", True), ("true", True), ("ON", True), ("0", False), ("no", False), ("", False)])
def test_both_spellings_turn_a_patch_on_and_off(name: str, value: str, on: bool) -> None:
    assert runtime.state(OFF_BY_DEFAULT, {}).on is False
    state = runtime.state(OFF_BY_DEFAULT, {name: value})
    assert state.on is on and name in state.reason


def test_default_on_patches_turn_off_by_zero_or_disable() -> None:
    assert runtime.state(ON_BY_DEFAULT, {}).on is True
    assert runtime.state(ON_BY_DEFAULT, {"GENESIS_ENABLE_PN35_INPUTS_EMBEDS_OPTIONAL": "0"}).on is False
    assert runtime.state(ON_BY_DEFAULT, {"GENESIS_DISABLE_PN35_INPUTS_EMBEDS_OPTIONAL": "1"}).on is False
    assert runtime.state(ON_BY_DEFAULT, {"SNDR_DISABLE_PN35_INPUTS_EMBEDS_OPTIONAL": "1"}).on is False
    # DISABLE wins over ENABLE
    both = {"GENESIS_DISABLE_PN35_INPUTS_EMBEDS_OPTIONAL": "1", "GENESIS_ENABLE_PN35_INPUTS_EMBEDS_OPTIONAL": "1"}
    assert runtime.state(ON_BY_DEFAULT, both).on is False


def test_patch_without_flag_is_always_on_and_unknown_id_is_off() -> None:
    assert runtime.state(ALWAYS_ON, {"GENESIS_ENABLE_P15": "0"}).on is True
    assert runtime.state("NOPE999", {}).on is False


def test_enabled_reads_the_environment_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP", raising=False)
    assert runtime.enabled(OFF_BY_DEFAULT) is False
    monkeypatch.setenv("GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP", "1")
    assert runtime.enabled(OFF_BY_DEFAULT) is True


def test_near_misses_are_named_with_the_closest_spelling() -> None:
    env = {"GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMPP": "1", "GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP": "1", "PATH": "/bin"}
    assert runtime.near_misses(env) == [
        ("GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMPP", "GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP")
    ]
    block = runtime.startup_block(env)
    assert block.splitlines()[0].startswith(f"Genesis patches built in: {len(runtime.registry())}, on: ")
    assert "unknown switch GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMPP" in block


def test_a_value_that_is_neither_on_nor_off_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    runtime._warned.discard("GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP")
    with caplog.at_level("WARNING", logger="vllm_genesis"):
        assert runtime.state(OFF_BY_DEFAULT, {"GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP": "maybe"}).on is True
    assert "neither on" in caplog.text
