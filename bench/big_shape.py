"""The Qwen3-30B-A3B shape where it does not fit: edge0's torch step against llama.cpp on the same weights under 3 and
8 GB caps, with the lower-bit slots beside all-int4, from one run.

    python bench/big_shape.py                    # build what is missing, run, write bench/results/big_shape.{txt,json}
    python bench/big_shape.py --caps 3072 --rounds 1 --tokens 4
    python bench/big_shape.py --report           # the tables again from the json
    python bench/big_shape.py --caps 3072 --rounds 2 --tokens 12 --kl --out bench/results/big_shape_low \
        --arms 'off int4,top-2 int4,top-2, other 6 at 3 bits,top-2, other 6 at 2 bits'   # the copies' KL too

The checkpoint: edge0.zoo.build_synthetic in Qwen3-30B-A3B's MoE shape (48 layers, 128 experts, top-8, hidden 2048,
expert FFN 768; about 17 GB at int4) with routing calibrated to trained MoEs' (routing='calibrated'; its routing
statistics printed first), converted to the torch-cpu layout with lower-bit copies of its experts (`edge0 convert
--low-bits`, then `--add` for the bits the arms read that it lacks: 2 bits are 0.55x the int4 bytes, 3 bits 0.76x) and,
where llama.cpp's arms run, written as a Q4_0 GGUF by edge0.gguf.write_q4_0 for llama.cpp (built by
../shared/tools/llama_anchor.sh). The source, the conversion with 2-bit copies and the GGUF take about 60 GB of disk;
3-bit copies 13 GB more, which is why the arms reading them ran apart from llama.cpp's (their GGUF deleted first).

Each arm runs in its own process in a child memory cgroup without swap that also counts the bytes its processes read
from the disk, the page cache dropped first, arms alternating over rounds:

- edge0 (the torch step, direct reads, the default budget), --tokens decode steps after a --prompt-token prompt: `off`;
  `routing` with heads warm-started from the routers (speed needs heads, not good ones), its planned layers' reads
  two layers at once (the default where experts are packed for torch) and one layer at a time (as before); `routing`
  at exact top-2 all-int4 and with the other six slots at 3 and at 2 bits; `off` with the experts under weight 0.1 at
  2 bits. Per step, from its counters: the MiB read, ms blocked on reads and ms of compute (the step less the blocked
  time). With --kl, every edge0 arm is fed the same random tokens after the prompt instead of its own picks, and each
  step's distribution is compared with `off int4`'s (the checkpoint's own routing at int4): KL(off int4 || arm) per
  token and top-1 agreement, as 05d's ladder measures its rungs (there against the bf16 teacher, which no cap here
  holds).
- llama.cpp (llama-bench, 2 threads, --repack 0 -lm mmap) decoding --tokens tokens: stock, and tuned with MADV_RANDOM on
  its mapping (LD_PRELOAD of madv_random.so). A run past --llama-timeout seconds is stopped: its rate is then below
  (tokens + its warm-up token) / timeout, which is what the table says.

B, the disk's rate at the expert grain past the page cache, is probed in the same run (edge0.measure.disk_rates) and
again at its end. The bound of an arm is max(compute, MiB / B). Targets (the issue's): edge0's decode >= 0.8x its
bound, and >= 3x llama.cpp stock at both caps. 'x base': tok/s and MiB a step of the lower-bit arms against their
all-int4 twins, and of `routing int4` against one layer at a time.
"""
import argparse, json, os, re, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_step import SHAPE_30B, anchor, llama, warm_heads  # noqa: E402
from direct_reads import NO_SWAP, disk, med  # noqa: E402
from low_bits import decode_arm  # noqa: E402  the torch step in one arm, its counters per decode step

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20
SHAPE = dict(SHAPE_30B, routing='calibrated')
# name: (mode, exact top-M, copies' bits, copies below this weight, planned layers read at once (None: the
# default)); llama.cpp's: (None, variant)
ARMS = {'off int4': ('off', 0, None, None, None), 'routing int4': ('routing', 0, None, None, None),
        'routing int4, 1 layer at once': ('routing', 0, None, None, 1),
        'top-2 int4': ('routing', 2, None, None, None), 'top-2, other 6 at 3 bits': ('routing', 2, 3, None, None),
        'top-2, other 6 at 2 bits': ('routing', 2, 2, None, None),
        'off, under 0.1 at 2 bits': ('off', 0, 2, 0.1, None),
        'llama.cpp stock': (None, 'stock'), 'llama.cpp tuned': (None, 'tuned')}
BASELINE = {'top-2, other 6 at 3 bits': 'top-2 int4', 'top-2, other 6 at 2 bits': 'top-2 int4', 'off, under 0.1 at 2 bits': 'off int4',
            'routing int4': 'routing int4, 1 layer at once'}
EDGE0 = [n for n, a in ARMS.items() if a[0]]


def checkpoints(mlx_model:Path, work:Path, bits:tuple=(2,), gguf:bool=True) -> tuple:
    """`(torch-cpu checkpoint with copies at `bits`, llama-bench, gguf)`, each built where missing (heads warm-started;
    no GGUF where not `gguf`: then `(model, None, None)`)"""
    from edge0.ladder import low_copy_of
    if not (mlx_model / 'config.json').exists():
        from edge0.zoo import build_synthetic
        print(f'building {mlx_model} (about 17 GB) ...', flush=True)
        t0 = time.time()
        build_synthetic(mlx_model, **SHAPE)
        print(f'  {time.time() - t0:.0f} s', flush=True)
    bench, gguf = anchor(mlx_model, work) if gguf else (None, None)  # the GGUF first: the copies are the larger write
    t0 = time.time()
    model = low_copy_of(mlx_model, mlx_model.with_name(mlx_model.name + '-torch-cpu'), bits, 'torch-cpu')
    if time.time() - t0 > 5: print(f"converted {mlx_model.name} -> {model} (torch-cpu, copies at {bits}): "
                                   f'{time.time() - t0:.0f} s', flush=True)
    if not (model / 'prerouter.safetensors').exists(): warm_heads(mlx_model, model)
    return model, bench, gguf


def run(model:Path, bench:Path, gguf:Path, caps:list, tokens:int, prompt:int, rounds:int, llama_timeout:float,
        rows:dict, save, arms:dict=ARMS, logits:Path|None=None):
    """Every arm of `arms` under every cap into `rows`, each in its own cgroup that caps memory and counts disk reads,
    page cache dropped first; `save()` after each. `logits`: edge0's arms are teacher-forced and save their
    log-probabilities in that folder"""
    from edge0.conditions import Cgroup, evict, memory_cap, read_counter, run_child
    from edge0.store import drop_cache
    for cap in caps:
        for r in range(rounds):
            for name, (mode, *arm) in (arms.items() if r % 2 == 0 else reversed(arms.items())):
                evict(model)
                if gguf: drop_cache(gguf)
                cg = Cgroup({**memory_cap(int(cap * MiB)), **read_counter(model)}, optional=NO_SWAP)
                try:
                    if mode is None: res = llama(bench, gguf, 'tg', tokens, cg, tuned=arm[0] == 'tuned',
                                                 timeout=llama_timeout)
                    else:
                        out = logits / f"{cap}-{r}-{name}.npy" if logits else None
                        res = run_child(decode_arm, str(model), mode,
                                        *arm[:3], tokens, prompt, stage_ahead=arm[3], cgroup=cg, timeout=3600,
                                        logits_to=str(out) if out else None)
                        res = res.get('result') or res
                        if out and 'tps' in res: res['logits'] = str(out)
                    res['disk_mib'] = cg.io_bytes()['read'] / MiB  # the whole process: load, prompt, warm-up included
                finally: cg.close()
                rows.setdefault(f'{cap}/{name}', []).append(res)
                save()
                if 'tps' not in res:
                    print(f"  {cap} MB round {r + 1} {name:29} " + (
                        f"stopped after {res['wall_s']:.0f} s" if res.get('timed_out') else
                        f"failed: {str(res.get('stderr', ''))[-300:]}"), flush=True)
                elif mode is None:
                    print(f"  {cap} MB round {r + 1} {name:29} {res['tps']:6.3f} tok/s, {res['disk_mib']:.0f} MiB "
                          f"read from disk in {res['wall_s']:.0f} s", flush=True)
                else:
                    print(f"  {cap} MB round {r + 1} {name:29} {res['tps']:6.3f} tok/s, {res['mib']:.0f} MiB read a "
                          f"step ({res['low_loads']:.0f} of {res['loads']:.0f} loads copies), {res['blocked_ms']:.0f} "
                          f"of {res['step_ms']:.0f} ms blocked, pool {res['pool_mib']:.0f} MiB; {res['disk_mib']:.0f} "
                          f"MiB read from disk in all", flush=True)


def kl_against(rows:dict, ref:str='off int4'):
    """Each teacher-forced run's KL(`ref` || arm) per token and top-1 agreement with the first run of `ref` under the
    same cap (`kl`, `top1`), and the same against its all-int4 twin (`BASELINE`: `kl_base`, `top1_base`), into its row"""
    import numpy as np
    for key, runs in rows.items():
        cap, name = key.split('/', 1)
        for other, suffix in ((ref, ''), (BASELINE.get(name), '_base')):
            refs = [r for r in rows.get(f"{cap}/{other}", []) if 'logits' in r]
            if not refs or other is None: continue
            p = np.load(refs[0]['logits'])
            for r in runs:
                if 'logits' not in r: continue
                q = np.load(r['logits'])
                r['kl' + suffix] = float(np.mean(np.sum(np.exp(p) * (p - q), -1)))
                r['top1' + suffix] = float(np.mean(p.argmax(-1) == q.argmax(-1)))


def report(d:dict) -> str:
    B = d['disk']['best_mib_s']
    out = [f"{d['date']}  {d['machine']}  {d['model']}", d['routing'], '',
           f"disk, random reads of {d['disk']['grain'] >> 10} KiB past the page cache: B = {B:.0f} MiB/s (depth "
           f"{d['disk']['best_depth']})" + (f"; probed again at the end: {d['disk_after']['best_mib_s']:.0f} MiB/s"
                                             if 'disk_after' in d else ''), '',
           f"decode of {d['tokens']} tokens (edge0 after a {d['prompt']}-token prompt; llama-bench after its warm-up "
           f"token), page cache dropped, each arm in its own cgroup; medians of {d['rounds']} rounds; per decode step",
           f"  {'cap':>7} {'arm':29} {'tok/s':>7} {'x base':>7} {'MiB':>6} {'x base':>7} {'blocked':>8} {'compute':>8} "
           f"{'MiB/B':>7} {'bound':>7} {'of step':>8} {'pool MiB':>8} {'disk MiB':>9}" +
           (f" {'KL':>7} {'top-1':>6} {'KL base':>8} {'top-1':>6}" if d.get('kl') else '')]
    if d.get('kl'): out.insert(-1, f"KL and top-1: each edge0 arm fed the same {d['tokens']} random tokens after the "
                               "prompt, its distributions against off int4's; 'KL base', 'top-1': against its all-int4 "
                               "twin's (the copies' own cost); medians over rounds")
    tps = {}
    for key, runs in d['rows'].items():
        cap, name = key.split('/', 1)
        rows = [r for r in runs if 'tps' in r]
        if not rows:
            r0 = runs[0]
            if r0.get('timed_out'):
                tps[key] = ('<', (d['tokens'] + 1) / r0['wall_s'])
                out.append(f"  {cap:>5}MB {name:29} {'< %.3f' % tps[key][1]:>7}  (stopped after {r0['wall_s']:.0f} s "
                           f"without finishing {d['tokens']} tokens and its warm-up token; {r0['disk_mib']:.0f} MiB "
                           f"read from disk by then)")
            else:
                why = str(r0.get('stderr', '')).strip().splitlines()
                out.append(f"  {cap:>5}MB {name:29} " + ('refused: ' + why[-1].split(': ', 1)[-1][:120] if why else
                                                        'failed'))
            continue
        tps[key] = ('=', med(rows, 'tps'))
        if ARMS.get(name, (None,))[0] is None:
            out.append(f"  {cap:>5}MB {name:29} {med(rows, 'tps'):7.3f} {'':7} {'':6} {'':7} {'':8} {'':8} {'':7} "
                       f"{'':7} {'':8} {'':8} {med(rows, 'disk_mib'):9.0f}")
            continue
        base = [r for r in d['rows'].get(f"{cap}/{BASELINE.get(name)}", []) if 'tps' in r]
        comp, io = med(rows, 'step_ms') - med(rows, 'blocked_ms'), 1e3 * med(rows, 'mib') / B
        bound = max(comp, io)
        xt = f"{med(rows, 'tps') / med(base, 'tps'):7.2f}" if base else f"{'':7}"
        xm = f"{med(rows, 'mib') / med(base, 'mib'):7.2f}" if base else f"{'':7}"
        out.append(f"  {cap:>5}MB {name:29} {med(rows, 'tps'):7.3f} {xt} {med(rows, 'mib'):6.0f} {xm} "
                   f"{med(rows, 'blocked_ms'):6.0f}ms {comp:6.0f}ms {io:5.0f}ms {bound:5.0f}ms "
                   f"{bound / med(rows, 'step_ms'):8.0%} {med(rows, 'pool_mib'):8.0f} {med(rows, 'disk_mib'):9.0f}" +
                   (f" {med(rows, 'kl'):7.4f} {med(rows, 'top1'):6.0%}" if all('kl' in r for r in rows) else '') +
                   (f" {med(rows, 'kl_base'):8.4f} {med(rows, 'top1_base'):6.0%}"
                    if all('kl_base' in r for r in rows) else ''))
    out += ['', "targets: edge0's decode >= 0.8x its bound ('of step': bound / step); edge0's best arm >= 3x llama.cpp "
            "stock at both caps"]
    for cap in d['caps']:
        e0 = {n: tps[f'{cap}/{n}'][1] for n in EDGE0 if tps.get(f'{cap}/{n}', ('', 0))[0] == '='}
        if not e0: continue
        best = max(e0, key=e0.get)
        line = f"  {cap} MB: edge0's best, {best}, {e0[best]:.3f} tok/s"
        for v in ('stock', 'tuned'):
            got = tps.get(f'{cap}/llama.cpp {v}')
            if got: line += f"; {'over ' if got[0] == '<' else ''}{e0[best] / got[1]:.1f}x llama.cpp {v}" + (
                f" (it ran below {got[1]:.3f})" if got[0] == '<' else f" ({got[1]:.3f})")
        stock = tps.get(f'{cap}/llama.cpp stock')
        if stock: line += ' -> ' + ('met' if e0[best] / stock[1] >= 3 else 'NOT met')
        runs = [r for r in d['rows'][f'{cap}/{best}'] if 'tps' in r]
        of = max(med(runs, 'step_ms') - med(runs, 'blocked_ms'), 1e3 * med(runs, 'mib') / B) / med(runs, 'step_ms')
        out.append(line + f"; at {of:.0%} of its bound -> " + ('met' if of >= 0.8 else 'NOT met'))
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-30b-calibrated'),
                    help='the mlx-layout synthetic in the 30B shape (built where missing)')
    ap.add_argument('--caps', default='3072,8192', help='memory caps, MB (MiB), comma-separated')
    ap.add_argument('--rounds', type=int, default=1)
    ap.add_argument('--tokens', type=int, default=8)
    ap.add_argument('--prompt', type=int, default=5)
    ap.add_argument('--llama', default=str(ROOT / 'build' / 'llama'), help='where llama.cpp is built (and the GGUFs)')
    ap.add_argument('--llama-timeout', type=float, default=600, help='seconds before a llama.cpp run is stopped')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'big_shape'))
    ap.add_argument('--arms', default=','.join(ARMS), help='the arms to run, comma-separated (default: all)')
    ap.add_argument('--kl', action='store_true', help="teacher-force edge0's arms; KL and top-1 against off int4")
    ap.add_argument('--report', action='store_true')
    a = ap.parse_args()
    names = [n.strip() for n in re.split(r',(?! )', a.arms)]  # arm names hold ', '
    if bad := [n for n in names if n not in ARMS]: sys.exit(f"--arms: {bad[0]!r} is not an arm; expected some of "
                                                            f"{', '.join(map(repr, ARMS))}")
    if a.kl and 'off int4' not in names: sys.exit("--kl compares each arm with 'off int4': add it to --arms")
    arms = {n: ARMS[n] for n in names}
    if a.report: return print(report(json.loads(Path(a.out + '.json').read_text())))
    from edge0.harness import routing_report
    t0, mlx_model = time.time(), Path(a.model)
    bits = tuple(sorted({arm[2] for arm in arms.values() if arm[0] and arm[2]}))
    model, bench, gguf = checkpoints(mlx_model, Path(a.llama), bits or (2,), any(arm[0] is None for arm in arms.values()))
    cpu = next((l.split(':', 1)[1].strip() for l in Path('/proc/cpuinfo').read_text().splitlines()
                if l.startswith('model name')), '?')
    flags = Path('/proc/cpuinfo').read_text()
    size = lambda pat: sum(f.stat().st_size for f in model.glob(pat)) / 1e9
    d = dict(date=time.strftime('%Y-%m-%d %H:%M'), machine=f"{cpu} ({'avx512f' if 'avx512f' in flags else 'no avx512f'}"
             f"), {os.cpu_count()} cores", rounds=a.rounds, tokens=a.tokens, prompt=a.prompt,
             caps=[int(c) for c in a.caps.split(',')], kl=a.kl,
             model=f"{model.name} (int4 {size('model*.safetensors'):.1f} GB" +
                   ''.join(f", {b}-bit copies {size(f'experts-q{b}-*'):.1f} GB" for b in (3, 2)
                           if size(f'experts-q{b}-*')) +
                   (f"; {gguf.name} {gguf.stat().st_size / 1e9:.1f} GB)" if gguf else ')'))
    d['routing'] = routing_report(model)
    print(d['routing'], flush=True)
    d['disk'] = disk(model)
    print(f"disk: B = {d['disk']['best_mib_s']:.0f} MiB/s", flush=True)
    save = lambda: Path(a.out + '.json').write_text(json.dumps(d, indent=1))
    d['rows'] = {}
    logits = ROOT / 'build' / 'bench' / 'big_shape_logits' if a.kl else None
    if logits: logits.mkdir(parents=True, exist_ok=True)
    run(model, bench, gguf, d['caps'], a.tokens, a.prompt, a.rounds, a.llama_timeout, d['rows'], save, arms, logits)
    if a.kl: kl_against(d['rows'])
    d['disk_after'] = disk(model)
    d['wall_s'] = time.time() - t0
    text = report(d) + f"\nwall {d['wall_s']:.0f} s"
    save()
    Path(a.out + '.txt').write_text(text + '\n')
    print('\n' + text)


if __name__ == '__main__': main()
