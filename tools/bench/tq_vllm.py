#!/usr/bin/env python3
"""vLLM 0.24.0's own TurboQuant backend on one GPU, with the routing patches off and on.

Builds ``TurboQuantAttentionImpl`` from the patched tree (``gqueue checkout && gqueue push
--all``, or ``--tree``), fills a k8v4 cache through its ``do_kv_cache_update`` (0.24.0's
store kernel), and runs ``forward()`` on decode and K+1 spec-verify batches with the Genesis
switches off (0.24.0's code paths) and on (P40 for decode; P67, P67 + PN521 and P67 + P67b
+ PN521 for verify). For each it records which attention launchers forward() called,
checks the output against a float64 reference (the tail from the cache, or from this step's
raw K/V under PN521: the cache's tail slots hold other values, so the two differ), and times
it: eager (``triton.testing.do_bench``: Python and launches included, L2 emptied before each
call) and, where forward() can be captured, as a CUDA-graph replay with the L2 emptied first
(``kernels.py --flush``).

vLLM's Python dependencies must be importable (the test environment `make test` builds
has them; on a GPU machine without them, wheels of the missing ones). vLLM's CUDA platform
imports compiled extension modules a source tree lacks; those are stubbed (the paths run
here are Triton kernels and PyTorch ops; a stubbed flash attention raises if called).

    python tools/bench/tq_vllm.py [--tree work] [--rows 0,1,2,3] [--json out.json] [--md docs/bench/tq_vllm.md]
    python tools/bench/tq_vllm.py --render out.json --md docs/bench/tq_vllm.md
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (kind, B, context incl. the query tokens, Hq, Hk, D, query tokens per request, cache preset)
K8V4 = "turboquant_k8v4"
ROWS = [
    ("decode", 1, 32768, 24, 4, 256, 1, K8V4),
    ("decode", 8, 32768, 32, 8, 128, 1, K8V4),
    ("verify", 1, 32768, 24, 4, 256, 6, K8V4),
    ("verify", 8, 8192, 32, 8, 128, 4, K8V4),
    ("decode", 1, 32768, 24, 4, 256, 1, "turboquant_4bit_nc"),
    ("verify", 1, 32768, 24, 4, 256, 6, "turboquant_3bit_nc"),
]
TINY_ROWS = [("decode", 3, 40, 6, 2, 64, 1, K8V4), ("verify", 3, 40, 6, 2, 64, 4, "turboquant_3bit_nc")]
CONFIGS = {
    "decode": [("0.24.0", ()), ("P40", ("P40",))],
    "verify": [
        ("0.24.0", ()),
        ("P67", ("P67",)),
        ("P67+PN521", ("P67", "PN521")),
        ("P67+P67b+PN521", ("P67", "P67b", "PN521")),
    ],
}
BLOCK_SIZE = 16


def _no_flash_attention(*args, **kwargs):
    raise RuntimeError("this vLLM tree has no compiled flash-attention extension")


# compiled modules a source tree lacks, and what stands in for them when they do not import
STUBS = {
    "vllm._C": {},
    "vllm._C_stable_libtorch": {},
    "vllm._moe_C": {},
    "vllm.cumem_allocator": {},
    "vllm.vllm_flash_attn": {
        "FA2_AVAILABLE": False,
        "FA3_AVAILABLE": False,
        "flash_attn_varlen_func": _no_flash_attention,
        "get_scheduler_metadata": lambda *args, **kwargs: None,
        "is_fa_version_supported": lambda *args, **kwargs: False,
        "fa_version_unsupported_reason": lambda *args, **kwargs: "no compiled flash-attention extension",
    },
}


def import_tree(tree: Path) -> None:
    for entry in (str(REPO / "kernels"), str(tree), str(REPO / "tools" / "bench")):
        sys.path.insert(0, entry)
    for name, attrs in STUBS.items():
        try:
            importlib.import_module(name)
        except ImportError:
            stub = types.ModuleType(name)
            stub.__dict__.update(attrs)
            sys.modules[name] = stub


def set_switches(on: tuple[str, ...]) -> None:
    """Exactly the patches ``on`` act (through their registered env flags)."""
    from vllm_genesis import runtime

    for name in list(os.environ):
        if name.startswith(runtime.PREFIXES):
            del os.environ[name]
    for patch_id in on:
        os.environ[runtime.registry()[patch_id].spellings("ENABLE")[0]] = "1"


class Recorder:
    """Wraps the launchers forward() may call and counts their calls."""

    NAMES = ("triton_turboquant_decode_attention", "genesis_tq_decode", "genesis_tq_verify")

    def __init__(self, module) -> None:
        self.counts = dict.fromkeys(self.NAMES, 0)
        self.prefill = 0
        for name in self.NAMES:
            if hasattr(module, name):
                setattr(module, name, self._wrap(name, getattr(module, name)))
        impl_cls = module.TurboQuantAttentionImpl
        prefill = impl_cls._prefill_attention

        def counted_prefill(impl, *args, **kwargs):
            self.prefill += 1
            return prefill(impl, *args, **kwargs)

        impl_cls._prefill_attention = counted_prefill

    def _wrap(self, name, fn):
        def call(*args, **kwargs):
            self.counts[name] += 1
            return fn(*args, **kwargs)

        return call

    def take(self) -> dict:
        seen = {k: v for k, v in self.counts.items() if v}
        if self.prefill:
            seen["_prefill_attention"] = self.prefill
        self.counts = dict.fromkeys(self.NAMES, 0)
        self.prefill = 0
        return seen


def build_case(row, dev):
    """The impl, a cache filled through vLLM's store, and both float64 references."""
    import torch
    import vllm.v1.attention.backends.turboquant_attn as tqa
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm_genesis.turboquant import TQLayout
    from vllm_genesis.turboquant.reference import reference_attention

    kind, B, L, Hq, Hk, D, QL, preset = row
    config = VllmConfig(device_config=DeviceConfig(device=dev))
    with set_current_vllm_config(config):
        impl = tqa.TurboQuantAttentionImpl(
            num_heads=Hq, head_size=D, scale=D**-0.5, num_kv_heads=Hk, kv_cache_dtype=preset
        )
    g = torch.Generator(device=dev).manual_seed(0)
    nb = -(-L // BLOCK_SIZE)
    shape = tqa.TurboQuantAttentionBackend.get_kv_cache_shape(B * nb + 1, BLOCK_SIZE, Hk, D, preset)
    kv = torch.zeros(shape, dtype=torch.uint8, device=dev)
    bt = torch.randperm(B * nb, generator=g, device=dev).view(B, nb).to(torch.int32)
    layer = torch.nn.Module()
    tails_k, tails_v = [], []
    pos = torch.arange(L, device=dev)
    for b in range(B):
        k = torch.randn(L, Hk, D, generator=g, device=dev).to(torch.bfloat16)
        v = (torch.randn(L, Hk, D, generator=g, device=dev) + 0.5).to(torch.bfloat16)
        stored_v = v.clone()
        if kind == "verify":
            stored_v[L - QL :] += 4.0  # the tail's cache slots hold other values than this step's V
        slots = bt[b].long()[pos // BLOCK_SIZE] * BLOCK_SIZE + pos % BLOCK_SIZE
        impl.do_kv_cache_update(layer, k.view(L, -1), stored_v.view(L, -1), kv, slots)
        tails_k.append(k[L - QL :])
        tails_v.append(v[L - QL :])
    N = B * QL
    q = torch.randn(N, Hq, D, generator=g, device=dev).to(torch.bfloat16)
    k_in, v_in = torch.cat(tails_k), torch.cat(tails_v)
    seq_lens = torch.full((B,), L, dtype=torch.int32, device=dev)
    qsl = torch.arange(0, N + 1, QL, dtype=torch.int32, device=dev)
    meta = tqa.TurboQuantMetadata(
        seq_lens=seq_lens, slot_mapping=torch.zeros(N, dtype=torch.long, device=dev),
        block_table=bt, query_start_loc=qsl, num_actual_tokens=N, max_query_len=QL, max_seq_len=L,
        is_prefill=kind != "decode", num_decodes=B if kind == "decode" else 0,
        num_decode_tokens=N if kind == "decode" else 0,
        query_start_loc_cpu=qsl.cpu(), seq_lens_cpu=seq_lens.cpu(),
    )
    out = torch.empty(N, Hq * D, dtype=torch.bfloat16, device=dev)

    def forward():
        return impl.forward(layer, q.view(N, -1), k_in.view(N, -1), v_in.view(N, -1), kv, meta, output=out)

    forward()  # the layer's rotation and centroids (MSE presets) are set on first use
    lay = TQLayout.from_preset(preset, D)
    store = dict(Pi=getattr(layer, "_tq_Pi", None), centroids=getattr(layer, "_tq_centroids", None))
    refs = {
        "cache": reference_attention(q, kv, bt, seq_lens, lay, D**-0.5, query_start_loc=qsl, **store),
        "raw": reference_attention(q, kv, bt, seq_lens, lay, D**-0.5, query_start_loc=qsl, key=k_in, value=v_in,
                                   **store),
    }

    return forward, refs, out


def run_row(row, dev, recorder, bench) -> list[dict]:
    import torch

    kind, B, L, Hq, Hk, D, QL, preset = row
    forward, refs, out_buf = build_case(row, dev)
    results = []
    for label, on in CONFIGS[kind]:
        set_switches(on)
        recorder.take()
        out = forward().view(B * QL, Hq, D).double()
        if dev == "cuda":
            torch.cuda.synchronize()
        calls = recorder.take()
        expect = "raw" if "PN521" in on else "cache"
        errs = {name: float((out - ref).norm() / ref.norm()) for name, ref in refs.items()}
        res = {
            "row": list(row), "config": label, "calls": calls, "nan": bool(torch.isnan(out).any()),
            "expected_tail": expect, "err": errs[expect], "err_other_tail": errs["raw" if expect == "cache" else "cache"],
        }
        res["eager_ms"] = bench.bench(forward)
        out_buf.fill_(float("nan"))  # what the graph's replays write is checked too
        try:
            res["graph_ms"] = bench.bench_graph(forward)
            replayed = out_buf.view(B * QL, Hq, D).double()
            res["graph_err"] = float((replayed - refs[expect]).norm() / refs[expect].norm())
        except Exception as exc:  # a path that cannot be captured: report why
            res["graph_ms"] = None
            res["graph_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            if dev == "cuda":
                torch.cuda.synchronize()
        results.append(res)
        graph = "-" if res["graph_ms"] is None else f"{res['graph_ms']:.4f} (err {res['graph_err']:.2e})"
        print(
            f"{kind} B={B} ctx={L} Hq={Hq} Hk={Hk} D={D} K+1={QL} {preset} | {label:<15} | err {res['err']:.2e} "
            f"(other tail {res['err_other_tail']:.2e}) nan={res['nan']} | eager {res['eager_ms']:.4f} ms | "
            f"graph {graph} ms | {calls} {res.get('graph_error', '')}",
            flush=True,
        )
    set_switches(())
    return results


def table(results: list[dict], device: str) -> str:
    """The results as the markdown table of docs/bench/tq_vllm.md."""
    lines = [
        f"One run on one {device}:",
        "",
        "    python tools/bench/tq_vllm.py --tree <patched tree> --json out.json --md docs/bench/tq_vllm.md",
        "",
        "`forward()` of vLLM 0.24.0's `TurboQuantAttentionImpl` (the patched tree) with the",
        "switches named, as a CUDA-graph replay with the L2 emptied first (write flush) and",
        "eagerly (`do_bench`: Python and launches included). Error: relative, against float64",
        "over the dequantised cache (tail from the raw K/V under PN521), for the eager output and",
        "for what the graph's replays wrote. x 0.24.0: graph time of the switches-off row over",
        "this row's.",
        "",
        "| row (B, ctx, Hq, Hk, D, K+1; preset if not k8v4) | switches on | launchers forward() called | err (eager / replays) "
        "| graph ms | x 0.24.0 | eager ms |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    base = {}
    for r in results:
        key = tuple(r["row"])
        if r["config"] == "0.24.0":
            base[key] = r["graph_ms"]
        kind, B, L, Hq, Hk, D, QL, preset = r["row"]
        speed = "-" if not (r["graph_ms"] and base.get(key)) else f"{base[key] / r['graph_ms']:.1f}x"
        graph = "-" if r["graph_ms"] is None else f"{r['graph_ms']:.4f}"
        graph_err = "-" if r.get("graph_err") is None else f"{r['graph_err']:.2e}"
        calls = ", ".join(f"{name} x{n}" for name, n in r["calls"].items())
        switches = "none (0.24.0)" if r["config"] == "0.24.0" else r["config"]
        lines.append(
            f"| {kind} {B}, {f'{L // 1024}K' if L % 1024 == 0 else L}, {Hq}, {Hk}, {D}, {QL}{'' if preset == K8V4 else ', ' + preset} | {switches} | {calls} | "
            f"{r['err']:.2e} / {graph_err} | {graph} | {speed} | {r['eager_ms']:.4f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=str(REPO / "work"), help="the patched vLLM tree")
    ap.add_argument("--rows", default=None, help="indexes into ROWS (comma-separated)")
    ap.add_argument("--tiny", action="store_true", help="small rows (for a CPU run under TRITON_INTERPRET=1)")
    ap.add_argument("--flush", choices=("write", "read"), default="write")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None, help="also write the results as a markdown table")
    ap.add_argument("--render", default=None, help="only write --md from a JSON file of an earlier run")
    a = ap.parse_args()
    if a.render:
        saved = json.loads(Path(a.render).read_text())
        Path(a.md).write_text(table(saved["results"], saved["device"]))
        return 0
    import_tree(Path(a.tree).resolve())
    import torch
    import triton

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    import kernels as bench  # tools/bench/kernels.py
    import vllm.v1.attention.backends.turboquant_attn as tqa
    from vllm.v1.worker import workspace

    bench.ARGS = argparse.Namespace(flush=a.flush, rep_ms=100, tune=False, tiny=a.tiny)
    if dev == "cpu":
        torch.accelerator.empty_cache = lambda: None  # vLLM's workspace calls it when it grows
    workspace.init_workspace_manager(torch.device(dev))
    recorder = Recorder(tqa)
    rows = TINY_ROWS if a.tiny else ROWS
    if a.rows:
        rows = [rows[int(i)] for i in a.rows.split(",")]
    device = torch.cuda.get_device_name() if dev == "cuda" else "CPU (Triton interpreter)"
    device += f"; torch {torch.__version__}, Triton {triton.__version__}"
    print(f"device: {device}", flush=True)
    results = [res for row in rows for res in run_row(row, dev, recorder, bench)]
    if a.json:
        Path(a.json).write_text(json.dumps({"device": device, "results": results}, indent=1))
    if a.md:
        Path(a.md).write_text(table(results, device))
    bad = [r for r in results if r["nan"] or not r["err"] <= 0.02 or not r.get("graph_err", 0.0) <= 0.02]
    for r in bad:
        print(f"FAILED check: {r['row']} {r['config']}: err {r['err']:.3g}, after replays "
              f"{r.get('graph_err')}, nan={r['nan']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
