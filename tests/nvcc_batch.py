#!/usr/bin/env python3
"""Compile CUDA files with nvcc several to a translation unit, for the tests' compile checks.

    nvcc_batch.py --nvcc NVCC --out DIR [--jobs N] [--batch N] [--flag F]... FILE...

Most of a small file's nvcc time is the CUDA headers (about 0.6 CPU-s a file with -cubin, 1.6
with -c, on the 2-core CI machine), so files with the same #include lines and the same target
are compiled together: each file #included inside a namespace of its own, its `launch` renamed,
every macro it defines undefined after it, the headers they all include first. Each file's
target is the gate's: sm_90, or sm_90a where inline PTX needs it (wgmma, setmaxnreg).

For file number I (0-based, in the order given) it writes DIR/I.log, nvcc's output for it,
DIR/I.rc, nvcc's exit status, and DIR/I.arch, the target flag it was compiled with. A batch that fails, warns, spills or has a stack frame is compiled
again one file at a time, so each file's log is its own whenever it says anything against it;
a clean batch's log is its files' log. The flags (e.g. -cubin, or -c) come before the file.
"""
import argparse
import concurrent.futures as cf
import os
import re
import subprocess
import sys

ARCH_SPECIFIC = ("wgmma.", "setmaxnreg.")
INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.M)
DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.M)
BAD = re.compile(r"warning|error|[1-9][0-9]* bytes spill|[1-9][0-9]* bytes stack frame")


def arch_flag(text):
    if any(p in text for p in ARCH_SPECIFIC):
        return "-gencode=arch=compute_90a,code=sm_90a"
    return "-arch=sm_90"


def run(nvcc, flags, arch, src, out_obj, log):
    cmd = [nvcc, arch] + flags + ["-Xptxas", "-v", src, "-o", out_obj]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(log, "w") as f:
        f.write(r.stdout)
    return r.returncode, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--flag", action="append", default=[])
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    texts = []
    for i, f in enumerate(a.files):
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
        except OSError as e:
            texts.append(None)
            with open(os.path.join(a.out, f"{i}.log"), "w") as fh:
                fh.write(f"error: {f}: cannot be read: {e.strerror}\n")
            with open(os.path.join(a.out, f"{i}.rc"), "w") as fh:
                fh.write("1\n")
    groups = {}
    for i, t in enumerate(texts):
        if t is None:
            continue
        with open(os.path.join(a.out, f"{i}.arch"), "w") as fh:
            fh.write(arch_flag(t) + "\n")
        key = (tuple(sorted(m.strip() for m in INCLUDE.findall(t))), arch_flag(t))
        groups.setdefault(key, []).append(i)
    batches = []
    for (includes, arch), members in groups.items():
        for k in range(0, len(members), a.batch):
            batches.append((includes, arch, members[k:k + a.batch]))

    def single(i):
        rc, _ = run(a.nvcc, a.flag, arch_flag(texts[i]), os.path.abspath(a.files[i]),
                    os.path.join(a.out, f"{i}.o"), os.path.join(a.out, f"{i}.log"))
        with open(os.path.join(a.out, f"{i}.rc"), "w") as f:
            f.write(f"{rc}\n")

    def batch(n):
        includes, arch, members = batches[n]
        if len(members) == 1:
            single(members[0])
            return
        lines = list(includes)
        for i in members:
            lines.append(f"#define launch kl_batch_launch_{i}")
            lines.append(f"namespace kl_batch_{i} {{")
            lines.append(f'#include "{os.path.abspath(a.files[i])}"')
            lines.append("}")
            lines.append("#undef launch")
            lines += [f"#undef {m}" for m in sorted(set(DEFINE.findall(texts[i])))]
        src = os.path.join(a.out, f"batch{n}.cu")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        log = os.path.join(a.out, f"batch{n}.log")
        rc, out = run(a.nvcc, a.flag, arch, src, os.path.join(a.out, f"batch{n}.o"), log)
        if rc != 0 or BAD.search(out):
            for i in members:
                single(i)
            return
        for i in members:
            with open(os.path.join(a.out, f"{i}.log"), "w") as f:
                f.write(out)
            with open(os.path.join(a.out, f"{i}.rc"), "w") as f:
                f.write("0\n")

    with cf.ThreadPoolExecutor(max(1, a.jobs)) as ex:
        list(ex.map(batch, range(len(batches))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
