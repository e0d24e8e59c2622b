"""PN28: the Triton merge_attn_states kernel no longer returns NaN when both lse are -inf.

The kernel runs under the Triton interpreter on CPU. vLLM decides at import time whether
Triton is usable, so the kernel module (and vllm.triton_utils) is imported afresh with
TRITON_INTERPRET=1 and restored afterwards. PN28 has no env flag (always on): the
``test_off_*`` case checks that ordinary inputs give the same result as upstream.

vLLM 0.34.0 guards the same case in its own kernel (``tl.where`` on ``max_lse == -inf``), so
PN28 is retired there: ``test_fixed_*`` runs on the releases that carry the patch, and
``test_upstream_*`` checks that pristine 0.34.0 gives the same answer.
"""

from __future__ import annotations

import importlib
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from _pins import only_on  # noqa: E402

MOD = "vllm.v1.attention.ops.triton_merge_attn_states"


def _ours(name: str) -> bool:
    return name == MOD or name == "vllm.triton_utils" or name.startswith("vllm.triton_utils.")


@pytest.fixture(scope="module")
def merge():
    saved = {k: v for k, v in sys.modules.items() if _ours(k)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        # An empty CUDA_VISIBLE_DEVICES lets vllm.triton_utils keep Triton with no driver.
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        # 0.34.0's Triton check asks for the installed vllm distribution's version (a CPU
        # build?), which a source tree on sys.path does not have: the lookup raises an
        # ImportError and Triton is turned off. A source tree is no CPU build.
        import vllm.platforms

        mp.setattr(vllm.platforms, "vllm_version_matches_substr", lambda substr: False, raising=False)
        for name in saved:
            del sys.modules[name]
        try:
            module = importlib.import_module(MOD)
            assert module.merge_attn_states_kernel.__class__.__name__ == "InterpretedFunction"
            yield module.merge_attn_states
        finally:
            for name in [k for k in sys.modules if _ours(k)]:
                del sys.modules[name]
            sys.modules.update(saved)


def _inputs(num_tokens=6, num_heads=3, head_size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    p_out = torch.randn(num_tokens, num_heads, head_size, generator=g)
    s_out = torch.randn(num_tokens, num_heads, head_size, generator=g)
    p_lse = torch.randn(num_heads, num_tokens, generator=g) * 4
    s_lse = torch.randn(num_heads, num_tokens, generator=g) * 4
    return p_out, p_lse, s_out, s_lse


def _run(merge, p_out, p_lse, s_out, s_lse):
    out = torch.empty_like(p_out)
    out_lse = torch.empty_like(p_lse)
    merge(out, p_out, p_lse, s_out, s_lse, out_lse)
    return out, out_lse


def _reference(p_out, p_lse, s_out, s_lse):
    """Upstream's formula for inputs with at least one finite lse."""
    p_lse = torch.where(p_lse == float("inf"), float("-inf"), p_lse)
    s_lse = torch.where(s_lse == float("inf"), float("-inf"), s_lse)
    mx = torch.maximum(p_lse, s_lse)
    p_se, s_se = torch.exp(p_lse - mx), torch.exp(s_lse - mx)
    tot = p_se + s_se
    p_scale = (p_se / tot).T.unsqueeze(-1)
    s_scale = (s_se / tot).T.unsqueeze(-1)
    return p_out * p_scale + s_out * s_scale, torch.log(tot) + mx


def _check_both_empty_give_zero_not_nan(merge, empty):
    p_out, p_lse, s_out, s_lse = _inputs()
    # token 2 / head 1 and token 4 / all heads: no keys in either state
    # (FA3 reports -inf, FA2 +inf). Their partial outputs are zero, as the backends write.
    for h, t in [(1, 2), (0, 4), (1, 4), (2, 4)]:
        p_lse[h, t] = s_lse[h, t] = empty
        p_out[t, h] = 0.0
        s_out[t, h] = 0.0
    out, out_lse = _run(merge, p_out, p_lse, s_out, s_lse)
    assert not torch.isnan(out).any()
    assert not torch.isnan(out_lse).any()
    assert torch.equal(out[4], torch.zeros_like(out[4]))
    assert torch.equal(out[2, 1], torch.zeros_like(out[2, 1]))
    assert out_lse[1, 2] == float("-inf") and (out_lse[:, 4] == float("-inf")).all()
    # everything else is the ordinary merge
    ref_out, ref_lse = _reference(p_out, p_lse, s_out, s_lse)
    keep = torch.ones(6, 3, dtype=torch.bool)
    keep[4, :] = False
    keep[2, 1] = False
    torch.testing.assert_close(out[keep], ref_out[keep])
    torch.testing.assert_close(out_lse.T[keep], ref_lse.T[keep])


@only_on("<0.34", "PN28 is retired on 0.34.0 (upstream guards the kernel)")
@pytest.mark.parametrize("empty", [float("-inf"), float("inf")])
def test_fixed_both_empty_states_give_zero_not_nan(merge, empty):
    _check_both_empty_give_zero_not_nan(merge, empty)


@only_on(">=0.34", "the upstream guard is in 0.34.0's kernel")
@pytest.mark.parametrize("empty", [float("-inf"), float("inf")])
def test_upstream_both_empty_states_give_zero_not_nan(merge, empty):
    """Pristine 0.34.0: merging two empty states (lse -inf, or FA2's +inf) gives a zero
    output and an lse of -inf, no NaN, and every other row is the ordinary merge."""
    _check_both_empty_give_zero_not_nan(merge, empty)


def test_off_finite_and_one_sided_inputs_match_upstream(merge):
    p_out, p_lse, s_out, s_lse = _inputs(seed=3)
    p_lse[0, 1] = float("-inf")  # only the suffix has keys here
    s_lse[2, 5] = float("inf")  # FA2-style empty suffix
    out, out_lse = _run(merge, p_out, p_lse, s_out, s_lse)
    ref_out, ref_lse = _reference(p_out, p_lse, s_out, s_lse)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(out_lse, ref_lse)
    torch.testing.assert_close(out[1, 0], s_out[1, 0])
    torch.testing.assert_close(out[5, 2], p_out[5, 2])
