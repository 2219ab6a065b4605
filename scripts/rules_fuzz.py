#!/usr/bin/env python3
"""Mutate CUDA files and run `klineage rewrite --list` on each (and, with --apply, every site
it lists): report every crash (a signal, a sanitizer report, an exit status other than 0/1/2)
with the mutated file kept under OUT/crash-N.cu.

    scripts/rules_fuzz.py --klineage build/klineage [--seeds 'tasks/*/*.cu' …] [--n 500]
                          [--seed 1] [--out /tmp/rules-fuzz] [--apply]

Mutations are token edits (delete, duplicate, swap, replace an identifier with another of
the file, insert a brace or parenthesis) and line edits (delete, duplicate), 1 to 3 per file,
from a seeded generator, so a run is reproducible."""
import argparse, glob, os, random, re, subprocess, sys

TOK = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|[A-Za-z_]\w*|\d[\w.]*|<<<|>>>|<<=|>>=|->|::|[-+*/%&|^!=<>]=?|.',
                 re.S)

def tokens(text):
    return TOK.findall(text)

def mutate(text, rng):
    toks = tokens(text)
    idents = [t for t in toks if re.match(r'[A-Za-z_]\w*$', t)] or ['x']
    code = [i for i, t in enumerate(toks) if not t.isspace() and not t.startswith('//') and not t.startswith('/*')]
    for _ in range(rng.randint(1, 3)):
        if not code:
            break
        kind = rng.randrange(7)
        i = rng.choice(code)
        if kind == 0:
            toks[i] = ''
        elif kind == 1:
            toks[i] = toks[i] + ' ' + toks[i]
        elif kind == 2:
            j = rng.choice(code)
            toks[i], toks[j] = toks[j], toks[i]
        elif kind == 3:
            toks[i] = rng.choice(idents)
        elif kind == 4:
            toks[i] = toks[i] + rng.choice(['{', '}', '(', ')', ';', ',', '[', ']'])
        else:
            lines = ''.join(toks).split('\n')
            k = rng.randrange(len(lines))
            if kind == 5:
                del lines[k]
            else:
                lines.insert(k, lines[k])
            toks = tokens('\n'.join(lines))
            code = [i for i, t in enumerate(toks) if not t.isspace() and not t.startswith('//') and not t.startswith('/*')]
    return ''.join(toks)

def crashed(p):
    err = p.stderr.decode(errors='replace')
    if p.returncode < 0 or p.returncode > 3:
        return True
    return 'Sanitizer' in err or 'runtime error:' in err

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--klineage', default='build/klineage')
    ap.add_argument('--seeds', nargs='*', default=['tasks/*/*.cu', 'tests/data/rules/**/*.before.cu'])
    ap.add_argument('--n', type=int, default=300)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--out', default='/tmp/rules-fuzz')
    ap.add_argument('--apply', action='store_true', help='also apply/remove every listed site')
    ap.add_argument('--timeout', type=float, default=60)
    a = ap.parse_args()
    files = sorted({f for g in a.seeds for f in glob.glob(g, recursive=True)})
    if not files:
        sys.exit('no seed files')
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    env = dict(os.environ, ASAN_OPTIONS='detect_leaks=0:abort_on_error=0', UBSAN_OPTIONS='halt_on_error=1')
    crashes = 0
    for n in range(a.n):
        src = rng.choice(files)
        text = mutate(open(src, encoding='utf-8', errors='replace').read(), rng)
        path = os.path.join(a.out, 'case.cu')
        open(path, 'w').write(text)
        cmds = [[a.klineage, '--json', 'rewrite', path, '--list']]
        try:
            p = subprocess.run(cmds[0], capture_output=True, timeout=a.timeout, env=env)
        except subprocess.TimeoutExpired:
            print(f'{n}: TIMEOUT on a mutation of {src}', flush=True)
            open(os.path.join(a.out, f'timeout-{n}.cu'), 'w').write(text)
            continue
        bad = [(cmds[0], p)] if crashed(p) else []
        if a.apply and not bad and p.returncode == 0:
            import json
            try:
                sites = json.loads(p.stdout)
            except ValueError:
                sites = []
            for s in sites:
                op = '--remove' if s['direction'] == 'present' else '--apply'
                c = [a.klineage, 'rewrite', path, op, f"{s['transform']}@{s['site']}", '-o', os.path.join(a.out, 'out.cu')]
                try:
                    q = subprocess.run(c, capture_output=True, timeout=a.timeout, env=env)
                except subprocess.TimeoutExpired:
                    print(f'{n}: TIMEOUT {" ".join(c[2:])}', flush=True)
                    continue
                if crashed(q):
                    bad.append((c, q))
                    break
        for c, q in bad:
            crashes += 1
            keep = os.path.join(a.out, f'crash-{n}.cu')
            open(keep, 'w').write(text)
            err = q.stderr.decode(errors='replace')
            frames = [l.strip() for l in err.splitlines() if re.match(r'\s*#\d+ ', l)][:6]
            head = next((l for l in err.splitlines() if 'ERROR' in l or 'runtime error' in l), err[-200:])
            print(f'{n}: CRASH ({src}) {" ".join(c[2:4])} -> {keep}\n  {head}\n  ' + '\n  '.join(frames), flush=True)
    print(f'{a.n} mutations, {crashes} crashes')
    sys.exit(1 if crashes else 0)

if __name__ == '__main__':
    main()
