"""Build, check and time conv2d variants for GPU MODE's conv2d_v2 task in one GPU session.

Stand-alone: needs only torch and triton (and a CUDA GPU). For every variant and every
`tests` + `benchmarks` shape of the task (task.yml of problems/pmpp_v2/conv2d_py):

1. Correctness on two input sets per shape, each drawn with GPU MODE's generator (randn
   input and weight from one CUDA generator): the task's seed and a fresh seed. The output is
   poisoned with NaN before the call. Reported against
   - the task's reference: cuDNN with TF32 off and deterministic on; `max_norm` is
     max |out - ref| / (atol + rtol * |ref|) with rtol = atol = 1e-3, so <= 1 passes;
   - a float64 reference (the same conv on float64 copies): relative L2 error
     ||out - r64|| / ||r64||, the same normalised max, and the max absolute error.
   The strict reference itself is measured against float64 too: it bounds what any
   candidate can show against it.
2. Timing on the task's benchmark inputs: one warm-up call (autotuning happens in the
   checks before), then `--reps` calls, each after writing a 256 MB buffer to flush the L2,
   bracketed by CUDA events; median and mean in ms.

Variants: `name=path.py` calls the file's `custom_kernel(data)`; `name=path.py:k=v,k=v` calls
its `conv2d(x, w, out, k=v, ...)` (ints parsed); a `time=0` item checks without timing.
Built-in references: cudnn_strict, cudnn_search (TF32 off, deterministic, benchmark=True),
cudnn_tf32 (TF32 on, benchmark=True; fails the tolerance, shown for speed), exact64 (the float64
result rounded to fp32, checked but not timed: the best any kernel can do against the strict
reference).

The full record goes to --out (JSON lines and a log); a short table is printed last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

RTOL = ATOL = 1e-3
TESTS = [
    {"size": 32, "kernelsize": 4, "channels": 16, "batch": 1, "seed": 4242},
    {"size": 32, "kernelsize": 4, "channels": 16, "batch": 2, "seed": 5236},
    {"size": 64, "kernelsize": 4, "channels": 32, "batch": 1, "seed": 1001},
    {"size": 64, "kernelsize": 8, "channels": 32, "batch": 2, "seed": 5531},
    {"size": 128, "kernelsize": 8, "channels": 64, "batch": 1, "seed": 9173},
]
BENCHMARKS = [
    {"size": 128, "kernelsize": 8, "channels": 64, "batch": 4, "seed": 54352},
    {"size": 128, "kernelsize": 16, "channels": 64, "batch": 4, "seed": 93246},
    {"size": 256, "kernelsize": 16, "channels": 128, "batch": 2, "seed": 6256},
    {"size": 256, "kernelsize": 16, "channels": 128, "batch": 2, "seed": 8841},
    {"size": 256, "kernelsize": 32, "channels": 128, "batch": 1, "seed": 6252},
]
FRESH_SEED_OFFSET = 1_000_003
# BENCH_DEVICE=cpu (with TRITON_INTERPRET=1) dry-runs the script's flow on the CPU
DEVICE = os.environ.get("BENCH_DEVICE", "cuda")


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def generate_input(size, kernelsize, channels, batch, seed):
    """GPU MODE's reference.py generate_input."""
    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(seed)
    x = torch.randn(batch, channels, size, size, device=DEVICE, dtype=torch.float32, generator=gen)
    w = torch.randn(
        channels, channels, kernelsize, kernelsize, device=DEVICE, dtype=torch.float32, generator=gen
    )
    out = torch.empty(
        batch, channels, size - kernelsize + 1, size - kernelsize + 1, device=DEVICE, dtype=torch.float32
    )
    return x.contiguous(), w.contiguous(), out


@contextmanager
def cudnn_flags(tf32, deterministic, benchmark):
    b = torch.backends.cudnn
    saved = (b.allow_tf32, b.deterministic, b.benchmark)
    b.allow_tf32, b.deterministic, b.benchmark = tf32, deterministic, benchmark
    try:
        yield
    finally:
        b.allow_tf32, b.deterministic, b.benchmark = saved


def strict_reference(x, w):
    with cudnn_flags(False, True, False):
        return F.conv2d(x, w)


def _cudnn_variant(tf32, deterministic, benchmark):
    def run(data):
        x, w, out = data
        with cudnn_flags(tf32, deterministic, benchmark):
            out.copy_(F.conv2d(x, w))
        return out

    return run


def _exact(data):
    """The float64 result rounded to fp32: what a perfect kernel returns."""
    x, w, out = data
    out.copy_(F.conv2d(x.double(), w.double()))
    return out


BUILTIN = {
    "exact64": _exact,
    "cudnn_strict": _cudnn_variant(False, True, False),
    "cudnn_search": _cudnn_variant(False, True, True),
    "cudnn_tf32": _cudnn_variant(True, False, True),
}

_SHIM_DIR = tempfile.mkdtemp(prefix="task_shim_")
with open(os.path.join(_SHIM_DIR, "task.py"), "w") as f:
    f.write("input_t = output_t = tuple\n")
sys.path.insert(0, _SHIM_DIR)
_MODULES = {}


def load_module(path):
    path = os.path.abspath(path)
    if path not in _MODULES:
        name = "cand_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _MODULES[path] = mod
    return _MODULES[path]


def parse_variant(spec):
    """'name=file.py[:k=v,...]' or a built-in name -> (name, callable, timed)."""
    if spec in BUILTIN:
        return spec, BUILTIN[spec], spec != "exact64"
    name, _, rest = spec.partition("=")
    path, _, kw_text = rest.partition(":")
    kwargs = {}
    for item in filter(None, kw_text.split(",")):
        k, _, v = item.partition("=")
        kwargs[k] = int(v) if v.lstrip("-").isdigit() else v
    timed = bool(kwargs.pop("time", 1))
    mod = load_module(path)
    if kwargs:

        def run(data, _mod=mod, _kw=kwargs):
            x, w, out = data
            return _mod.conv2d(x, w, out, **_kw)
    else:

        def run(data, _mod=mod):
            return _mod.custom_kernel(data)

    return name, run, timed


def compare(out, ref):
    """Error numbers of out against ref (ref may be float64)."""
    out64 = out.double()
    ref64 = ref.double()
    diff = (out64 - ref64).abs()
    norm = diff / (ATOL + RTOL * ref64.abs())
    finite = bool(torch.isfinite(out64).all())
    return {
        "rel_l2": float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64)),
        "max_norm": float(norm.max()) if finite else float("inf"),
        "max_abs": float(diff.max()) if finite else float("inf"),
        "n_fail": int((norm > 1).sum()) if finite else out.numel(),
    }


def shape_name(s):
    return f"b{s['batch']} c{s['channels']} s{s['size']} k{s['kernelsize']}"


def time_call(fn, data, flush, reps):
    fn(data)
    sync()
    times = []
    for _ in range(reps):
        flush.zero_()
        if DEVICE != "cuda":
            t = time.perf_counter()
            fn(data)
            times.append((time.perf_counter() - t) * 1e3)
            continue
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(data)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return {
        "median_ms": times[len(times) // 2],
        "mean_ms": sum(times) / len(times),
        "min_ms": times[0],
        "max_ms": times[-1],
        "reps": reps,
    }


def probe_accumulator_rounding(log):
    """Which way does a TF32 tensor-core dot round C + A@B? Exact result 1 + 0.75 ulp(1):
    round-to-nearest gives 1 + 1 ulp, truncation gives 1."""
    import triton
    import triton.language as tl

    @triton.jit
    def probe(a_ptr, b_ptr, c_ptr, o_ptr):
        i = tl.arange(0, 64)
        k = tl.arange(0, 16)
        a = tl.load(a_ptr + i[:, None] * 16 + k[None, :])
        b = tl.load(b_ptr + k[:, None] * 64 + i[None, :])
        c = tl.load(c_ptr + i[:, None] * 64 + i[None, :])
        d = tl.dot(a, b, c, input_precision="tf32")
        tl.store(o_ptr + i[:, None] * 64 + i[None, :], d)

    res = {}
    for name, small in [("+0.75ulp", 0.75), ("+0.25ulp", 0.25), ("-0.75ulp", -0.75)]:
        a = torch.zeros(64, 16, device="cuda")
        a[:, 0] = 1.0
        b = torch.zeros(16, 64, device="cuda")
        b[0, :] = small * 2.0**-23
        c = torch.ones(64, 64, device="cuda")
        o = torch.empty_like(c)
        probe[(1,)](a, b, c, o, num_warps=4)
        torch.cuda.synchronize()
        res[name] = float((o[0, 0].double() - 1.0) / 2.0**-23)
    log(
        f"tensor-core accumulate probe (result - 1, in ulp(1)=2^-23): {res}"
        "  [RN: +0.75->1, +0.25->0, -0.75->-0.5 or -1; RZ: +0.75->0, -0.75->-0.5]"
    )
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--shapes", default="tests,benchmarks")
    ap.add_argument("--limit", type=int, default=0, help="at most this many shapes of each group")
    ap.add_argument("--time-tests", action="store_true", help="time the tests shapes too")
    ap.add_argument("--probe", action="store_true", help="probe the tensor cores' accumulator rounding")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with (
        open(os.path.join(args.out, "bench.log"), "a") as log_file,
        open(os.path.join(args.out, "results.jsonl"), "a") as rec_file,
    ):
        run_all(args, log_file, rec_file)


def run_all(args, log_file, rec_file):

    def log(msg):
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    def record(**kw):
        rec_file.write(json.dumps(kw) + "\n")
        rec_file.flush()

    import triton

    if DEVICE == "cuda":
        dev = torch.cuda.get_device_properties(0)
        log(
            f"device {dev.name} SMs {dev.multi_processor_count} torch {torch.__version__} "
            f"triton {triton.__version__} cudnn {torch.backends.cudnn.version()}"
        )
    if args.probe:
        record(kind="probe", result=probe_accumulator_rounding(log))

    t0 = time.time()
    variants = [parse_variant(v) for v in args.variants]
    groups = [g for g in args.shapes.split(",") if g]
    lim = args.limit or None
    shapes = [("test", s) for s in TESTS[:lim] if "tests" in groups] + [
        ("bench", s) for s in BENCHMARKS[:lim] if "benchmarks" in groups
    ]
    flush = torch.empty(256 * 1024 * 1024 // 4, device=DEVICE, dtype=torch.float32)
    summary = {
        name: {"time": {}, "worst": 0.0, "worst64": 0.0, "rel_l2": 0.0, "fails": 0, "errors": []}
        for name, _, _ in variants
    }
    ref_err = {}

    for kind, s in shapes:
        sname = shape_name(s)
        for fresh in (False, True):
            seed = s["seed"] + (FRESH_SEED_OFFSET if fresh else 0)
            x, w, _ = generate_input(**{**s, "seed": seed})
            ref = strict_reference(x, w)
            r64 = F.conv2d(x.double(), w.double())
            e = compare(ref, r64)
            ref_err.setdefault(sname, []).append(e)
            record(kind="ref_vs_f64", shape=s, seed=seed, **e)
            log(
                f"[{sname} seed {seed}] cudnn_strict vs f64: rel_l2 {e['rel_l2']:.2e} "
                f"max_norm {e['max_norm']:.3f} max_abs {e['max_abs']:.2e}"
            )
            for name, fn, _ in variants:
                out = torch.full_like(ref, float("nan"))
                t_start = time.time()
                try:
                    res = fn((x, w, out))
                    sync()
                except Exception as exc:  # noqa: BLE001  (a variant that fails to build is reported, not fatal)
                    summary[name]["errors"].append(f"{sname}: {type(exc).__name__}: {exc}"[:300])
                    log(f"  {name:14s} ERROR {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                wall = time.time() - t_start
                vs_ref = compare(res, ref)
                vs64 = compare(res, r64)
                record(
                    kind="check",
                    variant=name,
                    shape=s,
                    seed=seed,
                    vs_ref=vs_ref,
                    vs_f64=vs64,
                    first_call_s=wall,
                )
                sm = summary[name]
                sm["worst"] = max(sm["worst"], vs_ref["max_norm"])
                sm["worst64"] = max(sm["worst64"], vs64["max_norm"])
                sm["rel_l2"] = max(sm["rel_l2"], vs64["rel_l2"])
                sm["fails"] += vs_ref["max_norm"] > 1
                log(
                    f"  {name:14s} vs ref max_norm {vs_ref['max_norm']:.3f} (n_fail {vs_ref['n_fail']}) | "
                    f"vs f64 rel_l2 {vs64['rel_l2']:.2e} max_norm {vs64['max_norm']:.3f} "
                    f"max_abs {vs64['max_abs']:.2e} | call {wall:.1f}s"
                )
            del x, w, ref, r64
        if kind != "bench" and not args.time_tests:
            continue
        x, w, out = generate_input(**s)
        for name, fn, timed in variants:
            if not timed or summary[name]["errors"]:
                continue
            st = time_call(fn, (x, w, out), flush, args.reps)
            summary[name]["time"][f"{sname} #{s['seed']}"] = st
            record(kind="time", variant=name, shape=s, **st)
            log(
                f"  {name:14s} time median {st['median_ms']:.3f} ms mean {st['mean_ms']:.3f} ms "
                f"(min {st['min_ms']:.3f} max {st['max_ms']:.3f})"
            )
        del x, w, out
    log(f"total {time.time() - t0:.0f} s")

    log("\n== strict reference (cuDNN, TF32 off) against float64, worst of two inputs ==")
    for sname, es in ref_err.items():
        log(
            f"  {sname:22s} rel_l2 {max(e['rel_l2'] for e in es):.2e} "
            f"max_norm {max(e['max_norm'] for e in es):.3f} max_abs {max(e['max_abs'] for e in es):.2e}"
        )
    bench_keys = [f"{shape_name(s)} #{s['seed']}" for k, s in shapes if k == "bench" or args.time_tests]
    log("\n== summary: per-shape mean ms (benchmarks), geomean; accuracy over all shapes x 2 inputs ==")
    log("  shapes: " + " | ".join(bench_keys))
    for name, _, _ in variants:
        sm = summary[name]
        means = [sm["time"][k]["mean_ms"] for k in bench_keys if k in sm["time"]]
        geo = (
            math.exp(sum(map(math.log, means)) / len(means))
            if means and len(means) == len(bench_keys)
            else float("nan")
        )
        cells = " ".join(f"{m:7.3f}" for m in means)
        status = "ERR" if sm["errors"] else ("PASS" if sm["fails"] == 0 else f"FAIL{sm['fails']}")
        log(
            f"  {name:14s} {cells} | geo {geo:7.3f} | {status:6s} max_norm ref {sm['worst']:.3f} "
            f"f64 {sm['worst64']:.3f} rel_l2 {sm['rel_l2']:.1e}"
        )
        record(kind="summary", variant=name, geomean_ms=geo, **{k: v for k, v in sm.items()})


if __name__ == "__main__":
    main()
