"""GQ1: the engine core logs the Genesis start-up block (patches built in, switches, typos)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest


class _Stop(Exception):
    """Raised by the stand-in executor: EngineCore.__init__ has logged by then."""


def _stop_executor(_config: object) -> None:
    raise _Stop


def _start_engine_core(monkeypatch: pytest.MonkeyPatch) -> str:
    from vllm.v1.engine import core
    from vllm_genesis import runtime

    runtime._logged.clear()
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Collect(level=logging.INFO)
    core.logger.addHandler(handler)
    old_level = core.logger.level
    core.logger.setLevel(logging.INFO)
    try:
        config = SimpleNamespace(parallel_config=SimpleNamespace(data_parallel_rank_local=0))
        with pytest.raises(_Stop):
            core.EngineCore(config, _stop_executor, log_stats=False)  # type: ignore[arg-type]
    finally:
        core.logger.removeHandler(handler)
        core.logger.setLevel(old_level)
    return "\n".join(records)


def test_fixed_engine_start_logs_the_patch_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP", "1")
    monkeypatch.setenv("GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAM", "1")  # a typo
    text = _start_engine_core(monkeypatch)
    assert "Genesis patches built in:" in text
    assert "ON  PN14" in text and "GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP=1" in text
    assert "ON  PN35" in text and "default on" in text
    assert "unknown switch GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAM" in text
    assert "did you mean GENESIS_ENABLE_PN14_TQ_DECODE_OOB_CLAMP?" in text


def test_fixed_engine_start_logs_only_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_genesis import runtime

    first = _start_engine_core(monkeypatch)
    assert first.count("Genesis patches built in:") == 1
    runtime._logged.set()
    from vllm.v1.engine import core

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    core.logger.addHandler(handler)
    try:
        with pytest.raises(_Stop):
            config = SimpleNamespace(parallel_config=SimpleNamespace(data_parallel_rank_local=0))
            core.EngineCore(config, _stop_executor, log_stats=False)  # type: ignore[arg-type]
    finally:
        core.logger.removeHandler(handler)
    assert not any("Genesis patches built in" in r for r in records)
