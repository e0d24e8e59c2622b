"""tools/bench/kernels.py --variant: the specs it accepts (no kernel is launched here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from vllm_genesis.turboquant.tiles import TileConfig

_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "bench" / "kernels.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("_bench_kernels", _SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_variant_spec_kind_tiles_and_splits(bench):
    assert bench.parse_variant("default") == (None, None, None)
    assert bench.parse_variant("decode:default@128") == ("decode", None, 128)
    kind, tiles, splits = bench.parse_variant('verify:T(64,4,2,"v",pipe=1,v_halves=True)@48')
    assert (kind, splits) == ("verify", 48)
    assert tiles == TileConfig(64, 4, 2, "v", pipe=1, v_halves=True)
    assert bench.parse_variant('TileConfig(64, 4, 3, "h", producer=True)') == (
        None, TileConfig(64, 4, 3, "h", producer=True), None)


@pytest.mark.parametrize("spec", ["(64, 4, 2)", "bogus(", "default@x"])
def test_variant_spec_that_is_not_a_configuration_is_refused(bench, spec):
    with pytest.raises((ValueError, SyntaxError)):
        bench.parse_variant(spec)
