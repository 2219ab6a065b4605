#!/usr/bin/env python3
"""Run a task's kernel files on the CPU, through the CUDA emulation in tests/corpus/emu/, at the
task's check shapes, and compare every output with the task's float64 reference.

usage: emulate.py TASK_DIR KERNEL.cu [KERNEL.cu ...] [--shapes SPEC] [--layouts LIST] [--seed N]
                  [--max-elements N] [--work DIR] [--pch-dir DIR] [--cxx CXX] [--cc CC] [-q]

  --shapes SPEC       which check shapes: "all" (default), or indexes "0,3,5"
  --max-elements N    skip check shapes whose largest tensor has more than N elements
                      (default 5,000,000)
  --layouts LIST      where tensors sit, one full run per layout (default "aligned,end"):
                      aligned  each tensor starts 256-byte aligned, as cudaMalloc's do (writes
                               past the end are caught by a canary in the slack before the guard
                               page, reads there are not);
                      end      each tensor ends exactly at a guard page (any access past the end
                               faults; the start is only as aligned as the size makes it);
                      shiftN   each tensor ends N bytes before its guard page (N = 4: tensors whose
                               size is a multiple of 16 start misaligned, as the gate's shifted
                               buffers may)
  --seed N            input seed (default 1)
  --pch-dir DIR       keep the emulated runtime's precompiled header there, under the hash of
                      what makes it (compiler, flags, the emulation's headers), for every later
                      run to use (default: the work folder, this run only). Most of a kernel
                      file's compile is that header; a kernel file that includes anything before
                      it compiles the header itself, with the same result.

Each kernel file is compiled with g++ against the emulated runtime (every CUDA thread a fiber,
blocks one after another), the reference with cc; then, per check shape, inputs are filled,
outputs poisoned, the reference and launch() run, and the outputs compared with the task's
tolerance. Exit status: 0 every kernel correct at every shape run, 1 a kernel wrong or crashed
(an access outside a tensor or a write to an input faults), 2 usage or build errors.

This is a test of kernels' logic and edges, not of the GPU's behaviour: a block's threads run
one at a time between barriers (one legal interleaving), so data races and anything timing-
dependent are not seen; the gate on the GPU remains the judge.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EMU = os.path.join(HERE, "emu")

DTYPES = {
    "f32*": ("F32", "float", "double"),
    "bf16*": ("BF16", "__nv_bfloat16", "double"),
    "f64*": ("F64", "double", "double"),
    "i32*": ("I32", "int32_t", "int32_t"),
    "u8*": ("U8", "uint8_t", "uint8_t"),
    "f16*": ("F16", "__half", "double"),
}


class Usage(Exception):
    pass


def c_eval(expr, env):
    """An integer expression of the task format, evaluated with C semantics (truncating / and %)."""
    if isinstance(expr, int):
        return expr
    toks = re.findall(r"\d+|[A-Za-z_]\w*|[-+*/%()]", expr)
    if "".join(toks) != re.sub(r"\s+", "", expr):
        raise Usage(f"cannot read expression {expr!r}")
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def primary():
        t = take()
        if t == "(":
            v = expr_()
            if take() != ")":
                raise Usage(f"unbalanced parentheses in {expr!r}")
            return v
        if t == "-":
            return -primary()
        if t == "+":
            return primary()
        if t.isdigit():
            return int(t)
        if t in env:
            return env[t]
        raise Usage(f"unknown name {t!r} in {expr!r}")

    def term():
        v = primary()
        while peek() in ("*", "/", "%"):
            op, r = take(), primary()
            if op == "*":
                v *= r
            else:
                q = abs(v) // abs(r) * (1 if (v >= 0) == (r >= 0) else -1)
                v = q if op == "/" else v - q * r
        return v

    def expr_():
        v = term()
        while peek() in ("+", "-"):
            op, r = take(), term()
            v = v + r if op == "+" else v - r
        return v

    v = expr_()
    if pos != len(toks):
        raise Usage(f"trailing text in {expr!r}")
    return v


def find_launch_callee_start(src, i):
    """Start of the callee expression ending just before src[i] (an identifier, maybe qualified,
    maybe with template arguments)."""
    j = i
    while j > 0 and src[j - 1].isspace():
        j -= 1
    if j > 0 and src[j - 1] == ">":  # template arguments
        depth = 0
        while j > 0:
            j -= 1
            if src[j] == ">":
                depth += 1
            elif src[j] == "<":
                depth -= 1
                if depth == 0:
                    break
        while j > 0 and src[j - 1].isspace():
            j -= 1
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_:"):
        j -= 1
    return j


def matching(src, i, open_, close):
    depth = 0
    for k in range(i, len(src)):
        if src[k] == open_:
            depth += 1
        elif src[k] == close:
            depth -= 1
            if depth == 0:
                return k
    raise Usage("unbalanced brackets in a kernel launch")


def preprocess(text):
    """CUDA -> C++ for the emulation: launches become emu::cfg(...)(kernel, args...), dynamic shared
    memory arrays become pointers into the emulated block's buffer."""
    text = re.sub(
        r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:]*(?:\s*\*)?)\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_]\w*)\s*\[\s*\]\s*;",
        lambda m: f"{m.group(1)}* {m.group(2)} = reinterpret_cast<{m.group(1)}*>(emu::dynamic_smem());",
        text)
    out = []
    pos = 0
    while True:
        i = text.find("<<<", pos)
        if i < 0:
            out.append(text[pos:])
            break
        start = find_launch_callee_start(text, i)
        callee = text[start:i].strip()
        j = text.find(">>>", i)
        if j < 0:
            raise Usage("a <<< without >>>")
        cfg = text[i + 3:j]
        k = j + 3
        while text[k].isspace():
            k += 1
        if text[k] != "(":
            raise Usage("a kernel launch without arguments in parentheses")
        end = matching(text, k, "(", ")")
        args = text[k + 1:end].strip()
        out.append(text[pos:start])
        out.append(f"emu::cfg({cfg})(({callee}){', ' + args if args else ''})")
        pos = end + 1
    return "".join(out)


def generate_main(task, shapes, seed):
    args = task["args"]
    tol = task["tolerance"]
    exact = bool(tol.get("exact"))
    rel = float(tol.get("rel_l2", 0))
    max_abs = float(tol.get("max_abs", 0))
    lines = []
    w = lines.append
    w("#include <cuda_runtime.h>")  # first, so that the precompiled header serves it
    w('#include "harness.h"')
    kproto = []
    for a in args:
        if "value" in a:
            kproto.append("int")
        else:
            _, ct, _ = DTYPES[a["type"]]
            kproto.append(("const " if a["role"] == "in" else "") + ct + "*")
    w(f'extern "C" void launch({", ".join(kproto)}, cudaStream_t);')
    proto = []
    for a in args:
        if "value" in a:
            proto.append("int")
        else:
            _, _, rt = DTYPES[a["type"]]
            proto.append(("const " if a["role"] == "in" else "") + rt + "*")
    w(f'extern "C" void reference({", ".join(proto)});')
    w("int main(int argc, char** argv) {")
    w("    const long layout = argc > 1 ? atol(argv[1]) : 0;")
    w("    harness::install_fault_handler();")
    w("    int failures = 0;")
    for label, env in shapes:
        desc = " ".join(f"{k}={v}" for k, v in env.items())
        w("    {")
        w(f'        harness::g_where = "{label} ({desc})";')
        w(f'        printf("{label} ({desc})\\n"); fflush(stdout);')
        call_k, call_r = [], []
        for n, a in enumerate(args):
            if "value" in a:
                v = c_eval(a["value"], env)
                call_k.append(str(v))
                call_r.append(str(v))
                continue
            dt, ct, rt = DTYPES[a["type"]]
            count = c_eval(a["shape"], env)
            w(f"        harness::Tensor t{n} = harness::make_tensor(harness::{dt}, {count}LL, layout);")
            if a["role"] == "out":
                w(f"        harness::poison(t{n});")
            else:
                init = a["init"]
                d = init["dist"]
                if d == "normal":
                    w(f"        harness::fill(t{n}, harness::NORMAL, {float(init.get('mean', 0))!r}, "
                      f"{float(init.get('std', 1))!r}, {seed * 1000 + n}ULL);")
                else:
                    lo, hi = init["lo"], init["hi"]
                    lo = c_eval(lo, env) if isinstance(lo, str) else lo
                    hi = c_eval(hi, env) if isinstance(hi, str) else hi
                    kind = "UNIFORM" if d == "uniform" else "INT_UNIFORM"
                    w(f"        harness::fill(t{n}, harness::{kind}, {float(lo)!r}, {float(hi)!r}, {seed * 1000 + n}ULL);")
                if a["role"] == "in":
                    w(f"        harness::protect_readonly(t{n});")
            w(f"        void* r{n} = harness::reference_view(t{n}, {'true' if a['role'] == 'out' else 'false'});")
            const = "const " if a["role"] == "in" else ""
            call_k.append(f"({const}{ct}*)t{n}.p")
            call_r.append(f"({const}{rt}*)r{n}")
        w(f"        reference({', '.join(call_r)});")
        w(f"        launch({', '.join(call_k)}, (cudaStream_t)0);")
        w('        if (cudaGetLastError() != cudaSuccess) { printf("    launch failed\\n"); failures++; }')
        for n, a in enumerate(args):
            if "value" in a or a["role"] == "in":
                continue
            w(f'        if (!harness::compare("{a["name"]}", t{n}, r{n}, {str(exact).lower()}, {rel!r}, {max_abs!r})) failures++;')
            w(f'        if (!harness::slack_intact(t{n}, "{a["name"]}")) failures++;')
        for n, a in enumerate(args):
            if "value" in a:
                continue
            if not (a["dtype_int"] and a["role"] == "in"):
                w(f"        free(r{n});")
            w(f"        harness::release(t{n});")
        w("    }")
    w('    printf(failures ? "%d wrong\\n" : "all correct\\n", failures);')
    w("    return failures ? 1 : 0;")
    w("}")
    return "\n".join(lines) + "\n"


def precompiled_header(flags, pch_dir):
    """The folder holding cuda_runtime.h.gch for these flags (made once, atomically: two runs may
    share pch_dir), to go first on the include path."""
    h = hashlib.sha256()
    h.update(("\0".join(flags)).encode())
    h.update(subprocess.run([flags[0], "--version"], stdout=subprocess.PIPE, text=True).stdout.encode())
    for name in sorted(os.listdir(EMU)):
        with open(os.path.join(EMU, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    where = os.path.join(pch_dir, h.hexdigest()[:24])
    gch = os.path.join(where, "cuda_runtime.h.gch")
    if not os.path.exists(gch):
        os.makedirs(where, exist_ok=True)
        tmp = f"{gch}.{os.getpid()}.tmp"
        run(flags + ["-x", "c++-header", os.path.join(EMU, "cuda_runtime.h"), "-o", tmp],
            "precompiling the emulated runtime")
        os.replace(tmp, gch)
    return where


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        raise Usage(f"{what} failed")
    return p.stdout


def main(argv):
    opts = {"shapes": "all", "layouts": "aligned,end", "seed": 1, "max_elements": 5_000_000, "work": None,
            "pch_dir": None,
            "cxx": os.environ.get("CXX", "g++"), "cc": os.environ.get("CC", "cc"), "quiet": False}
    pos = []
    it = iter(argv)
    for a in it:
        if a in ("--shapes", "--layouts", "--seed", "--max-elements", "--work", "--pch-dir", "--cxx", "--cc"):
            v = next(it, None)
            if v is None:
                raise Usage(f"{a} needs a value")
            key = a[2:].replace("-", "_")
            opts[key] = int(v) if key in ("seed", "max_elements") else v
        elif a in ("-q", "--quiet"):
            opts["quiet"] = True
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        elif a.startswith("-"):
            raise Usage(f"unknown option {a}")
        else:
            pos.append(a)
    if len(pos) < 2:
        raise Usage("usage: emulate.py TASK_DIR KERNEL.cu [KERNEL.cu ...] (see --help)")
    task_dir, kernels = pos[0], pos[1:]
    with open(os.path.join(task_dir, "task.json")) as f:
        task = json.load(f)
    for a in task["args"]:
        a["dtype_int"] = a.get("type") in ("i32*", "u8*")
    checks = task["shapes"]["check"]
    if opts["shapes"] == "all":
        idx = list(range(len(checks)))
    else:
        idx = [int(s) for s in opts["shapes"].split(",") if s.strip()]
    shapes = []
    for i in idx:
        env = checks[i]
        biggest = max(c_eval(a["shape"], env) for a in task["args"] if "shape" in a)
        if biggest > opts["max_elements"]:
            continue
        shapes.append((f"check[{i}]", env))
    work = opts["work"] or tempfile.mkdtemp(prefix="kl-emu-")
    os.makedirs(work, exist_ok=True)
    ref_obj = os.path.join(work, "reference.o")
    run([opts["cc"], "-O2", "-ffp-contract=off", "-std=c11", "-c",
         os.path.join(task_dir, task.get("reference", "reference.c")), "-o", ref_obj], "compiling the reference")
    layouts = []
    for name in opts["layouts"].split(","):
        name = name.strip()
        if name == "aligned":
            layouts.append((name, -1))
        elif name == "end":
            layouts.append((name, 0))
        elif re.fullmatch(r"shift\d+", name):
            layouts.append((name, int(name[5:])))
        else:
            raise Usage(f"unknown layout {name!r} (aligned, end, shiftN)")
    flags = [opts["cxx"], "-std=c++17", "-O1", "-w", "-fsanitize=alignment", "-fno-sanitize-recover=alignment"]
    pch = precompiled_header(flags + ["-I", EMU], opts["pch_dir"] or work)
    flags += ["-I", pch, "-I", EMU]
    bad = 0
    for kfile in kernels:
        base = os.path.splitext(os.path.basename(kfile))[0]
        with open(kfile) as f:
            text = f.read()
        pp = os.path.join(work, base + ".emu.cpp")
        with open(pp, "w") as f:
            f.write(f'#line 1 "{os.path.abspath(kfile)}"\n' + preprocess(text))
        main_cpp = os.path.join(work, base + ".main.cpp")
        with open(main_cpp, "w") as f:
            f.write(generate_main(task, shapes, opts["seed"]))
        exe = os.path.join(work, base + ".emu")
        run(flags + ["-c", pp, "-o", exe + ".kernel.o"], f"compiling {kfile} for the emulation")
        run(flags + ["-c", main_cpp, "-o", exe + ".main.o"], f"compiling the harness of {kfile}")
        run(flags + [exe + ".kernel.o", exe + ".main.o", ref_obj, "-o", exe, "-lm"], f"linking {kfile}")
        for lname, layout in layouts:
            p = subprocess.run([exe, str(layout)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode == 0:
                verdict = f"{kfile}: correct at {len(shapes)} check shapes (emulated, {lname} tensors)"
            else:
                bad += 1
                verdict = f"{kfile}: FAILED with {lname} tensors (exit {p.returncode})"
            if not opts["quiet"] or p.returncode != 0:
                sys.stdout.write(p.stdout)
            print(verdict, flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Usage as e:
        print(f"emulate.py: {e}", file=sys.stderr)
        sys.exit(2)
