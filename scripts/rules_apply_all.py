#!/usr/bin/env python3
"""Every site `klineage rewrite --list` lists, rewritten: the share of listed sites that apply
(the catalog's promise: 100 %), and of the results, the share that compile with nvcc where the
original does. Needs no GPU.

    scripts/rules_apply_all.py [--klineage BIN] [--jobs N] [--no-compile] [--json OUT] FILE.cu|DIR ...

A folder stands for every *.cu under it (a task folder: its .cu files, with --task). Each
present site is removed and each applicable one applied (with the parameters --list says it
applies with); a rewrite that fails, or a result that nvcc (-cubin) rejects where it accepts
the original, is printed. Compiles are cached by content hash in $KLINEAGE_CACHE/compile-check
(the same cache `klineage rewrite` uses)."""
import argparse, concurrent.futures as cf, glob, hashlib, json, os, subprocess, sys, tempfile

def nvcc_path():
    e = os.environ.get('KLINEAGE_NVCC')
    if e:
        return e
    for d in os.environ.get('PATH', '').split(':'):
        if d and os.access(os.path.join(d, 'nvcc'), os.X_OK):
            return os.path.join(d, 'nvcc')
    return '/usr/local/cuda/bin/nvcc' if os.access('/usr/local/cuda/bin/nvcc', os.X_OK) else None

def cache_dir():
    c = os.environ.get('KLINEAGE_CACHE') or os.path.join(os.environ.get('XDG_CACHE_HOME') or
                                                         os.path.expanduser('~/.cache'), 'klineage')
    d = os.path.join(c, 'compile-check-py')
    os.makedirs(d, exist_ok=True)
    return d

def compiles(nvcc, text, incdir):
    arch = '-gencode=arch=compute_90a,code=sm_90a' if ('wgmma.' in text or 'setmaxnreg.' in text) else '-arch=sm_90'
    key = hashlib.sha256(('1\0' + nvcc + '\0' + arch + '\0' + text).encode()).hexdigest()
    mark = os.path.join(cache_dir(), key)
    if os.path.exists(mark + '.ok'):
        return True, ''
    if os.path.exists(mark + '.fail'):
        return False, open(mark + '.fail').read()
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, 'k.cu')
        open(p, 'w').write(text)
        r = subprocess.run([nvcc, arch, '-cubin', '-x', 'cu', '-I', incdir, p, '-o', os.path.join(d, 'k.cubin')],
                           capture_output=True, text=True, timeout=600)
    ok = r.returncode == 0
    errs = '\n'.join(l for l in (r.stdout + r.stderr).splitlines() if 'error' in l)[:800]
    open(mark + ('.ok' if ok else '.fail'), 'w').write('' if ok else errs)
    return ok, errs

def files_of(args):
    out = []
    for a in args:
        if os.path.isdir(a):
            out += sorted(glob.glob(os.path.join(a, '**', '*.cu'), recursive=True))
        else:
            out.append(a)
    return out

def task_of(path):
    d = os.path.dirname(os.path.abspath(path))
    return d if os.path.exists(os.path.join(d, 'task.json')) else None

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('paths', nargs='+')
    ap.add_argument('--klineage', default='build/klineage')
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--no-compile', action='store_true')
    ap.add_argument('--json')
    a = ap.parse_args()
    nvcc = None if a.no_compile else nvcc_path()
    rows = []
    listed = applied = refused = 0
    pending = []
    for f in files_of(a.paths):
        task = task_of(f)
        targ = ['--task', task] if task else []
        r = subprocess.run([a.klineage, '--quiet', '--json', 'rewrite', f, '--list'] + targ, capture_output=True, text=True)
        if r.returncode != 0:
            print(f'{f}: --list failed: {r.stderr.strip()[-300:]}')
            rows.append({'file': f, 'list_error': r.stderr.strip()[-300:]})
            continue
        sites = json.loads(r.stdout)
        orig = open(f, encoding='utf-8', errors='replace').read()
        for s in sites:
            if s['direction'] == 'refused':
                refused += 1
                continue
            listed += 1
            op = '--remove' if s['direction'] == 'present' else '--apply'
            cmd = [a.klineage, '--quiet', 'rewrite', f, op, f"{s['transform']}@{s['site']}", '--no-compile-check'] + targ
            for k, v in (s.get('applies_with') or {}).items():
                cmd += ['--param', f'{k}={v}']
            q = subprocess.run(cmd, capture_output=True, text=True)
            row = {'file': f, 'transform': s['transform'], 'site': s['site'], 'direction': s['direction'],
                   'applied': q.returncode == 0}
            if q.returncode != 0:
                row['error'] = q.stderr.strip()[-400:]
                print(f"LISTED BUT FAILED {f} {op} {s['transform']}@{s['site']}: {row['error']}")
            else:
                applied += 1
                pending.append((row, orig, q.stdout, os.path.dirname(os.path.abspath(f))))
            rows.append(row)
    comp_ok = comp_n = 0
    if nvcc and pending:
        with cf.ThreadPoolExecutor(a.jobs) as ex:
            origs = {}
            for row, orig, res, inc in pending:
                if orig not in origs:
                    origs[orig] = ex.submit(compiles, nvcc, orig, inc)
            futs = [(row, origs[orig], ex.submit(compiles, nvcc, res, inc)) for row, orig, res, inc in pending]
            for row, fo, fr in futs:
                o_ok, _ = fo.result()
                if not o_ok:
                    row['compiles'] = None
                    continue
                r_ok, errs = fr.result()
                row['compiles'] = r_ok
                comp_n += 1
                comp_ok += r_ok
                if not r_ok:
                    print(f"DOES NOT COMPILE {row['file']} {row['direction']} {row['transform']}@{row['site']}:\n  {errs[:600]}")
    print(f'listed {listed} sites (present or applicable), {applied} rewrote ({100.0 * applied / max(listed, 1):.1f} %); '
          f'{refused} refused with a reason')
    if nvcc:
        print(f'compiled {comp_n} results whose original compiles: {comp_ok} compile ({100.0 * comp_ok / max(comp_n, 1):.1f} %)')
    if a.json:
        json.dump({'listed': listed, 'applied': applied, 'refused': refused, 'compiled': comp_n, 'compile_ok': comp_ok,
                   'rows': rows}, open(a.json, 'w'), indent=1)
    return 0 if applied == listed and comp_ok == comp_n else 1

if __name__ == '__main__':
    sys.exit(main())
