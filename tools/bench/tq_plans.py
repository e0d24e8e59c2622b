"""The builds the TurboQuant launch plans choose, compiled for sm_90 on the CPU (``tq_sass.py --plans``).

The public launchers (``tq_decode_attention``, ``tq_verify_attention``) run on CPU tensors
with ``KernelInterface.__getitem__`` replaced by a recorder: every launch (stage 1 and the
combine) is bound and specialised as Triton's own launcher would on an sm_90 device, and
each distinct build is compiled once with Triton's bundled ptxas. The device facts the
plans read are those of an H100/H200 (132 SMs, fp8 e4m3, the warp-group kernels), or of a
GPU without the warp-group kernels (``hopper=False``).

``compare(a, b)`` diffs two dumps launch by launch with the kernels' symbol names replaced
by ``KERNEL`` (renaming a ``@triton.jit`` function changes only its symbol).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

import torch
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime import jit as tjit

TARGET = GPUTarget("cuda", 90, 32)
SMS = 132


class Case(NamedTuple):
    """One launcher call: kind ("decode"/"verify"), batch, context, query heads, KV heads,
    head size, query tokens a request, preset, a TileConfig expression (None: the plan),
    split count (None: the plan's), the combine as a programmatic dependent launch, the
    device's warp-group kernels, raw tail (verify)."""

    kind: str
    B: int
    L: int
    Hq: int
    Hk: int
    D: int
    QL: int = 1
    preset: str = "turboquant_k8v4"
    tiles: str | None = None
    splits: int | None = None
    pdl: bool = False
    hopper: bool = True
    raw_tail: bool = True

    def label(self) -> str:
        t = "plan" if self.tiles is None else re.sub(r"[^A-Za-z0-9=,.-]+", "", self.tiles)
        return (f"{self.kind}-B{self.B}-L{self.L}-H{self.Hq}x{self.Hk}-D{self.D}-Q{self.QL}-{self.preset[11:]}-{t}"
                + (f"-S{self.splits}" if self.splits else "") + ("-pdl" if self.pdl else "")
                + ("" if self.hopper else "-nohopper") + ("" if self.raw_tail else "-notail"))


def cases() -> list[Case]:
    rows = [("decode", 1, 8192, 24, 4, 256, 1), ("decode", 1, 32768, 24, 4, 256, 1),
            ("decode", 1, 131072, 24, 4, 256, 1), ("verify", 1, 32768, 24, 4, 256, 6),
            ("decode", 8, 32768, 32, 8, 128, 1), ("decode", 32, 8192, 32, 8, 128, 1)]
    out = []
    for r in rows:  # the benchmark rows, in a graph (pdl) and eager, on Hopper and elsewhere
        for pdl in (True, False):
            out.append(Case(*r, pdl=pdl))
        out.append(Case(*r, hopper=False))
    # verify: K + 1 = 2..8, groups 4-8, one and several requests, D = 128 / 256
    for d, hq, hk in ((256, 24, 4), (128, 32, 8), (256, 32, 4)):
        for ql in (2, 3, 4, 6, 8):
            for b in (1, 4):
                out.append(Case("verify", b, 32768, hq, hk, d, ql, pdl=True))
        out.append(Case("verify", 1, 32768, hq, hk, d, 6, hopper=False))
        out.append(Case("verify", 4, 8192, hq, hk, d, 4, raw_tail=False))
    # MSE-key presets: few and many pairs, decode and verify
    for preset in ("turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"):
        for d in (128, 256):
            out.append(Case("decode", 1, 32768, 24, 4, d, preset=preset))
            out.append(Case("decode", 16, 8192, 32, 8, d, preset=preset))
            out.append(Case("verify", 1, 8192, 24, 4, d, 6, preset=preset))
            out.append(Case("verify", 16, 8192, 24, 4, d, 6, preset=preset))
    out.append(Case("decode", 2, 1024, 12, 2, 64))  # small heads (tests' shapes)
    out.append(Case("verify", 2, 1024, 12, 2, 64, 6))
    # tile requests the tests and the benchmark variants reach
    for t in ('T(64, 4, 1, "g")', 'T(32, 4, 1, "g", maxnreg=168)', 'T(64, 4, 2, "h", producer=True)',
              'T(64, 4, 2, "h", warp_max=True)', 'T(64, 4, 2, "h", producer=True, warp_max=True)',
              'T(64, 4, 3, "h")', 'T(64, 4, 2, "h", prefetch=1)', 'T(64, 4, 5, "q", 2)', 'T(64, 4, 1, "n", True, words=4)',
              'T(64, 4, 1, "n", 2, words=2)', 'T(64, 4, 3, maxnreg=168)', 'T(64, 4, 3, head_major=True)',
              'T(64, 4, 3, sz_word=False, fused_sums=False)', 'T(64, 4, 2, "w", words=2, vsplit=2)'):
        out.append(Case("decode", 1, 32768, 24, 4, 256, tiles=t))
    for t in ('T(32, 2, 5, "w", words=2)', 'T(32, 2, 1, "w", True, words=2)', 'T(64, 4, 5, "n", words=1)',
              'T(64, 4, 5, "n", words=3)'):
        out.append(Case("decode", 8, 32768, 32, 8, 128, tiles=t))
    for pipe in range(5):
        for halves in (False, True):
            out.append(Case("verify", 1, 32768, 24, 4, 256, 6, tiles=f'T(64, 4, 2, "v", pipe={pipe}, v_halves={halves})'))
        out.append(Case("verify", 1, 32768, 24, 4, 256, 6, tiles=f'T(64, 4, 2, "v", pipe={pipe}, split_ring=True)'))
    for t in ('T(32, 4, 2, "v", pipe=1)', 'T(64, 4, 3, "v")', 'T(64, 4, 5, "q", 2, lazy=-1.0, rows_m=True, rsplit=2)',
              'T(64, 4, 5, "q", 2, rows_m=True)', 'T(64, 4, 5, "q")', 'T(32, 4, 5)', 'T(64, 4, 2, "h")'):
        out.append(Case("verify", 1, 32768, 24, 4, 256, 6, tiles=t))
    out.append(Case("verify", 2, 8192, 32, 8, 128, 8, tiles='T(64, 4, 2, "v", pipe=4)'))
    out.append(Case("decode", 1, 32768, 24, 4, 256, splits=7))
    out.append(Case("decode", 1, 32768, 24, 4, 256, splits=70))
    return out


# -------------------------------------------------------------------------- recording


def _arg_type(x) -> str:
    return "T" if isinstance(x, torch.Tensor) else type(x).__name__


@contextmanager
def _recording(log: list):
    """Kernel launches appended to ``log`` as (jit function, args, kwargs), not run."""
    saved = tjit.KernelInterface.__getitem__

    def getitem(self, grid):
        def launch(*args, **kwargs):
            log.append((self, args, kwargs))
            return None

        return launch

    tjit.KernelInterface.__getitem__ = getitem
    try:
        yield
    finally:
        tjit.KernelInterface.__getitem__ = saved


@contextmanager
def _device(hopper: bool):
    """The device facts the plans read, as on an sm_90 GPU (``hopper``) or one without the
    warp-group kernels. Patches whichever of the launcher's names this tree has."""
    import importlib

    patches = []
    for mod_name in ("_launch", "plan", "_plan", "device"):
        try:
            mod = importlib.import_module(f"vllm_genesis.turboquant.{mod_name}")
        except ImportError:
            continue
        if hasattr(mod, "fp8_mma_default"):
            patches.append((mod, "fp8_mma_default", lambda index: hopper))
        if hasattr(mod, "num_sms"):
            patches.append((mod, "num_sms", lambda index: SMS))
        facts = getattr(mod, "CacheFacts", None)
        if facts is not None and "of" in vars(facts):
            of = vars(facts)["of"].__func__

            def fake_of(cls, layout, kv_cache, _of=of):
                from dataclasses import replace

                return replace(_of(cls, layout, kv_cache), hopper=hopper, ptx_ok=True, e4m3=True)

            patches.append((facts, "of", classmethod(fake_of)))
    saved = [(obj, name, vars(obj)[name] if name in vars(obj) else getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


def record(case: Case) -> list:
    """The launches of one launcher call."""
    import vllm_genesis.turboquant as tq
    from vllm_genesis.turboquant import TQLayout
    from vllm_genesis.turboquant.reference import gaussian_centroids, hadamard

    tile_cls = _tile_config_class()
    lay = TQLayout.from_preset(case.preset, case.D)
    nb = -(-case.L // 16)
    cache = torch.zeros(4, 16, case.Hk, lay.slot_size_aligned, dtype=torch.uint8)
    bt = torch.zeros(case.B, nb, dtype=torch.int32)
    T = case.B * case.QL
    q = torch.zeros(T, case.Hq, case.D, dtype=torch.bfloat16)
    seq_lens = torch.full((case.B,), case.L, dtype=torch.int32)
    extra = {}
    if not lay.key_fp8:
        extra = dict(centroids=gaussian_centroids(case.D, lay.mse_bits), PiT=hadamard(case.D))
    tiles = None if case.tiles is None else eval(case.tiles, {"T": tile_cls, "TileConfig": tile_cls})
    log: list = []
    with ExitStack() as stack:
        stack.enter_context(_device(case.hopper))
        stack.enter_context(_programmatic(case.pdl))
        stack.enter_context(_recording(log))
        if case.kind == "decode":
            tq.tq_decode_attention(q, cache, bt, seq_lens, layout=lay, tiles=tiles, num_splits=case.splits,
                                   overlap_prior=case.pdl, **extra)
        else:
            k = v = None
            if case.raw_tail:
                k = torch.zeros(T, case.Hk, case.D, dtype=torch.bfloat16)
                v = torch.zeros_like(k)
            qsl = torch.arange(0, T + 1, case.QL, dtype=torch.int32)
            tq.tq_verify_attention(q, k, v, cache, bt, seq_lens, qsl, case.QL, layout=lay, tiles=tiles,
                                   num_splits=case.splits, **extra)
    return log


def _tile_config_class():
    import importlib

    for mod_name in ("_launch", "plan", "_plan", "tiles"):
        try:
            mod = importlib.import_module(f"vllm_genesis.turboquant.{mod_name}")
        except ImportError:
            continue
        if hasattr(mod, "TileConfig"):
            return mod.TileConfig
    raise ImportError("no TileConfig in vllm_genesis.turboquant")


def _programmatic(enabled: bool):
    import importlib

    for mod_name in ("_launch", "plan", "_plan", "combine"):
        try:
            mod = importlib.import_module(f"vllm_genesis.turboquant.{mod_name}")
        except ImportError:
            continue
        if hasattr(mod, "programmatic_combine"):
            return mod.programmatic_combine(enabled)
    raise ImportError("no programmatic_combine in vllm_genesis.turboquant")


# -------------------------------------------------------------------------- building


def _bind(fn, args, kwargs):
    """Triton's own launch-time binding on an sm_90 target: (options, signature, constexprs, attrs)."""
    backend = make_backend(TARGET)
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    binder = tjit.create_function_from_signature(fn.signature, fn.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    return fn._pack_args(backend, kwargs, bound_args, specialization, options)


def build_key(fn, args, kwargs) -> str:
    options, signature, constexprs, attrs = _bind(fn, args, kwargs)
    opts = {k: v for k, v in sorted(options.__dict__.items()) if k != "debug"}
    return json.dumps([fn.__name__, signature, sorted((str(k), repr(v)) for k, v in constexprs.items()),
                       sorted((str(k), repr(v)) for k, v in attrs.items()), repr(opts)])


def compile_launch(fn, args, kwargs):
    options, signature, constexprs, attrs = _bind(fn, args, kwargs)
    if fn.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource as source
    else:
        source = ASTSource
    src = source(fn, signature, constexprs, attrs)
    return triton.compile(src, target=TARGET, options=options.__dict__)


def _cuobjdump(ck, flag: str) -> str:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(ck.asm["cubin"])
        f.flush()
        return subprocess.run([str(tool), flag, f.name], capture_output=True, text=True, check=True).stdout


def dump_plans(out: Path, only: str | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    built: dict[str, tuple[str, str]] = {}  # build key -> (file stem, summary)
    manifest = {}
    for case in cases():
        label = case.label()
        if only and only not in label:
            continue
        try:
            log = record(case)
        except Exception as exc:  # noqa: BLE001 - a call the launcher refuses is a fact too
            manifest[label] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{label}: refused: {type(exc).__name__}: {exc}", flush=True)
            continue
        launches = []
        for i, (fn, args, kwargs) in enumerate(log):
            key = build_key(fn, args, kwargs)
            stem = f"{label}.{i}"
            if key not in built:
                ck = compile_launch(fn, args, kwargs)
                sass = _cuobjdump(ck, "-sass")
                (out / f"{stem}.sass").write_text(sass)
                usage = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", _cuobjdump(ck, "-res-usage"))
                built[key] = (stem, f"{fn.__name__} {usage.group(0) if usage else ''} dyn-smem {ck.metadata.shared}")
                print(f"{stem}: {built[key][1]}", flush=True)
            launches.append({"kernel": fn.__name__, "build": built[key][0], "summary": built[key][1]})
        manifest[label] = {"launches": launches}
    (out / "plans.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"{len(manifest)} calls, {len(built)} distinct builds -> {out}")


# -------------------------------------------------------------------------- comparing


def normalise(sass: str) -> str:
    """The SASS with the kernel's symbol (``Function : NAME``, sections, relocations) as ``KERNEL``."""
    names = set(re.findall(r"Function\s*:\s*(\S+)", sass))
    for name in sorted(names, key=len, reverse=True):
        sass = sass.replace(name, "KERNEL")
    return "\n".join(ln for ln in sass.splitlines() if ".cubin" not in ln)


def compare(a: Path, b: Path) -> int:
    """0 when every launch of every call has the same normalised SASS in both dumps (and the
    same calls and launch counts), 1 otherwise; prints the differences."""
    ma = json.loads((a / "plans.json").read_text())
    mb = json.loads((b / "plans.json").read_text())
    bad = 0
    for label in sorted(set(ma) | set(mb)):
        la, lb = ma.get(label), mb.get(label)
        if la is None or lb is None:
            print(f"{label}: only in {'after' if la is None else 'before'}")
            bad += 1
            continue
        if "error" in la or "error" in lb:
            if la.get("error") != lb.get("error"):
                print(f"{label}: refused differently: {la.get('error')!r} / {lb.get('error')!r}")
                bad += 1
            continue
        if len(la["launches"]) != len(lb["launches"]):
            print(f"{label}: {len(la['launches'])} launches before, {len(lb['launches'])} after")
            bad += 1
            continue
        for i in range(len(la["launches"])):
            sa = normalise((a / f"{la['launches'][i]['build']}.sass").read_text())
            sb = normalise((b / f"{lb['launches'][i]['build']}.sass").read_text())
            if sa != sb:
                print(f"{label} launch {i} ({la['launches'][i]['kernel']} -> {lb['launches'][i]['kernel']}): SASS differs")
                bad += 1
    builds_a = {x["build"] for v in ma.values() for x in v.get("launches", [])}
    names = sorted({(x["kernel"], y["kernel"]) for k in ma if k in mb
                    for x, y in zip(ma[k].get("launches", []), mb[k].get("launches", []))})
    for x, y in names:
        print(f"  {x} -> {y}")
    print(f"{len(ma)} calls, {sum(len(v.get('launches', [])) for v in ma.values())} launches, "
          f"{len(builds_a)} distinct builds: {'all identical' if not bad else f'{bad} differences'}")
    return 1 if bad else 0
