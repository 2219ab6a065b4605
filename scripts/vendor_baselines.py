#!/usr/bin/env python3
"""Vendor baselines for the built-in suite: PyTorch's kernel for each memory-bound task,
timed at the task's bench shape (read from tasks/*/task.json), on random data drawn from
the task's own input distributions.

    python3 scripts/vendor_baselines.py [--tasks DIR] [--reps N] [--only NAME ...]

Prints one JSON object on stdout:
    {task: {"vendor": "...", "median_ms": x, "bytes": b, "tb_s": ..., ...}, ...}
where "bytes" is the task's own cost.bytes at the bench shape (so kernel and vendor are
judged against the same byte count). Each repetition: a 256 MB buffer is written to flush
the 60 MB L2, then the vendor call alone is timed with CUDA events; median of --reps (>= 20).
The GEMMs are skipped: the gate times cuBLAS itself. Needs only torch (with CUDA).
"""
import argparse
import ast
import glob
import json
import os
import statistics
import sys

FLUSH_BYTES = 256 * 1024 * 1024


def c_div(a, b):
    if b == 0:
        raise ValueError("division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def c_mod(a, b):
    return a - c_div(a, b) * b


def eval_expr(expr, sizes):
    """An integer size expression with C semantics ('/' truncates toward zero)."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in sizes:
                raise ValueError("unknown size %r in %r" % (node.id, expr))
            return int(sizes[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.Div):
                return c_div(a, b)
            if isinstance(node.op, ast.Mod):
                return c_mod(a, b)
        raise ValueError("unsupported expression %r" % expr)
    return ev(ast.parse(str(expr), mode="eval"))


def bound(value, sizes):
    """An init bound: a number, or an integer expression over the sizes."""
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except ValueError:
        return eval_expr(value, sizes)


def make_inputs(torch, task, sizes):
    """Every tensor argument of the task at `sizes`, drawn from its init (outputs: empty)."""
    dtypes = {"f32*": torch.float32, "f16*": torch.float16, "bf16*": torch.bfloat16,
              "f64*": torch.float64, "i32*": torch.int32, "u8*": torch.uint8}
    out = {}
    for arg in task["args"]:
        if arg["type"] == "int":
            out[arg["name"]] = eval_expr(arg["value"], sizes)
            continue
        n = eval_expr(arg["shape"], sizes)
        dt = dtypes[arg["type"]]
        init = arg.get("init")
        if arg.get("role") == "out" or init is None:
            out[arg["name"]] = torch.empty(n, dtype=dt, device="cuda")
            continue
        dist = init["dist"]
        if dist == "normal":
            t = torch.randn(n, device="cuda", dtype=torch.float32) * float(init.get("std", 1)) + float(init.get("mean", 0))
        elif dist == "uniform":
            lo, hi = bound(init["lo"], sizes), bound(init["hi"], sizes)
            t = torch.rand(n, device="cuda", dtype=torch.float32) * (hi - lo) + lo
        elif dist == "int_uniform":
            lo, hi = int(bound(init["lo"], sizes)), int(bound(init["hi"], sizes))
            t = torch.randint(lo, hi + 1, (n,), device="cuda", dtype=torch.int64)
        else:
            raise ValueError("unknown distribution %r" % dist)
        out[arg["name"]] = t.to(dt).contiguous()
    return out


def vendor_op(torch, name, a):
    """(description, a callable running PyTorch's kernel on the inputs a) for task `name`."""
    F = torch.nn.functional
    if name == "softmax":
        x = a["x"].view(a["rows"], a["cols"])
        return "torch.softmax(x, dim=-1)", lambda: torch.softmax(x, dim=-1)
    if name == "layernorm":
        x = a["x"].view(a["rows"], a["cols"])
        g, b = a["gamma"], a["beta"]
        return ("torch.nn.functional.layer_norm(x, (cols,), gamma, beta, eps=1e-5)",
                lambda: F.layer_norm(x, (a["cols"],), g, b, eps=1e-5))
    if name == "reduce_sum":
        x = a["x"]
        return "torch.sum(x)", lambda: torch.sum(x)
    if name == "transpose":
        x = a["x"].view(a["rows"], a["cols"])
        return "x.t().contiguous()", lambda: x.t().contiguous()
    if name == "blur":
        k = a["k"]
        img = a["img"].view(1, 1, a["h"], a["w"])
        filt = a["filt"].view(1, 1, k, k)
        return ("torch.nn.functional.conv2d(img, filt, padding=k//2) (cuDNN, TF32 off)",
                lambda: F.conv2d(img, filt, padding=k // 2))
    if name == "histogram":
        x = a["x"]
        return "torch.bincount(x_u8, minlength=256)", lambda: torch.bincount(x, minlength=256)
    return None, None


def time_op(torch, fn, reps, flush):
    for _ in range(3):  # warm-up: kernel selection, allocator, cuDNN plans
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.fill_(i & 0xff)  # write 256 MB: nothing of the inputs stays in L2
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", default=os.path.join(here, "..", "tasks"), help="the suite folder")
    ap.add_argument("--reps", type=int, default=30, help="timed repetitions (at least 20)")
    ap.add_argument("--only", nargs="*", help="task names to time (default: all)")
    args = ap.parse_args()
    if args.reps < 20:
        ap.error("--reps must be at least 20")

    try:
        import torch
    except ImportError as e:
        print("error: torch is needed: %s" % e, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA device visible to torch", file=sys.stderr)
        return 2
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    device = torch.cuda.get_device_name(0)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    result = {}
    for path in sorted(glob.glob(os.path.join(args.tasks, "*", "task.json"))):
        with open(path) as f:
            task = json.load(f)
        name = task["name"]
        if args.only and name not in args.only:
            continue
        if name in ("sgemm", "hgemm"):
            print("%s: skipped (the gate times cuBLAS itself)" % name, file=sys.stderr)
            continue
        sizes = task["shapes"]["bench"]
        inputs = make_inputs(torch, task, sizes)
        desc, fn = vendor_op(torch, name, inputs)
        if fn is None:
            print("%s: no vendor equivalent known, skipped" % name, file=sys.stderr)
            continue
        times = time_op(torch, fn, args.reps, flush)
        median = statistics.median(times)
        nbytes = eval_expr(task["cost"]["bytes"], sizes)
        entry = {
            "vendor": desc,
            "median_ms": round(median, 5),
            "min_ms": round(times[0], 5),
            "max_ms": round(times[-1], 5),
            "reps": args.reps,
            "bytes": nbytes,
            "tb_s": round(nbytes / (median * 1e-3) / 1e12, 4),
            "shape": sizes,
            "device": device,
            "torch": torch.__version__,
        }
        result[name] = entry
        print("%s: %s %.4f ms (%.3f TB/s)" % (name, desc, median, entry["tb_s"]), file=sys.stderr)
        del inputs
        torch.cuda.empty_cache()

    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
