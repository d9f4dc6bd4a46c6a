"""The quality ladder, measured in one run: for each committed teacher at its native K and at K/2, the bf16 teacher, int4,
int4 with K narrowed (own routing), the prerouter's routing, exact top-1 and top-2, the phase-2 and phase-3 adapters, and
phase 3 with exact top-1, and with `--low 3,2` lower-bit copies (exact top-2's other K-2 slots at 3 and at 2 bits,
top-1's at K=2; and `off` with the experts under routing weight 0.1 at 2 bits, served from a copy of the teacher
converted with `--low-bits 2,3`); each rung's decode speed measured beside it.

    python bench/quality_ladder.py                   # after `make adapters`; writes bench/results/quality_ladder.{json,txt,png}
    python bench/quality_ladder.py --windows 8       # a quicker look

Per rung: held-out perplexity, top-1 agreement with the teacher, mean KL(teacher || served) per token, the share of the
KL that routing replacement opened (over int4 under its own routing at the same K) that the rung recovers, decode tok/s
(`edge0.session.Session` serving the rung: greedy, the sample's prompt, median of 3), and a greedy sample with its
4-gram repetition. The adapters are the stage files `edge0 train --phase sft|3` leaves in the work folder; where a teacher
has none there, its committed adapter (phase 3) stands in for phase 3, beside a phase-2 stage file when there is one (the
run says whether it is the file the committed adapter started from, by its `from_phase2` hash), else phase 2 is not
measured. Adapters trained on the
exact top-1 path (`--exact-top 1`, stage files `...-top1-phase{2,3}`) add rungs served at exact top-1.
"""
import argparse, json, os, platform, sys, time
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RUNS = (('edge0-tiny-code', 8), ('edge0-tiny-code', 4), ('edge0-tiny', 8), ('edge0-tiny', 4), ('edge0-tiny-ds', 4),
        ('edge0-tiny-ds', 2))
TARGETS = {'edge0-tiny-code': {'+ phase-3 LoRA': 0.50, '+ phase-3 LoRA, exact-top-1': 0.75,  # the issue's, and the
                                '+ phase-3 LoRA@top-1, exact-top-1': 0.75}}  # adapter trained on the path it serves

def own_rung(rows, k:int) -> dict:
    "The rung routing replacement is measured against: int4 under its own routing at `k`"
    return next(r for r in rows if r['rung'] in (f'int4, K={k} own routing', f'int4 (K={k})'))

def recovered(rows, k:int, key:str='kl') -> dict:
    "Per rung after routing: the share of the `key` gap routing replacement opened (over own routing at `k`) it takes back"
    routed, own = next(r for r in rows if r['rung'] == '+ prerouter routing')[key], own_rung(rows, k)[key]
    after = rows[[r['rung'] for r in rows].index('+ prerouter routing') + 1:]
    return {r['rung']: (routed - r[key]) / (routed - own) for r in after}

def adapters_for(name:str, k:int, work) -> tuple[dict, str]:
    "The adapter files of each phase, and where they come from"
    from edge0.files import teacher_path
    from edge0.lora import adapter_file
    from edge0.recovery import stage_file
    import hashlib
    from edge0.store import read_header
    staged = {p: stage_file(work, name, k, p) for p in (2, 3) if stage_file(work, name, k, p).exists()}
    exact = [p for p in (2, 3) if stage_file(work, name, k, p, 1).exists()]
    also = f"; trained at exact top-1: phase {', '.join(map(str, exact))} (stage files)" if exact else ''
    if 3 in staged: return staged, f"stage files of {work}{also}"
    committed = teacher_path(name) / adapter_file(k)
    if not committed.exists():
        raise SystemExit(f"no adapters for {name} at K={k}: run `make adapters` (stage files in {work})")
    if 2 in staged:  # phase 2 retrained by the same recipe beside the committed phase 3: say whether it is the same file
        digest, was = hashlib.sha256(staged[2].read_bytes()).hexdigest()[:16], read_header(committed)[1]['from_phase2']
        same = ('the file it started from' if digest == was else
                f"not the file it started from (sha {was}): the same recipe, retrained")
        return {2: staged[2], 3: committed}, (f"phase 2 from {work} (sha {digest}; for the committed {committed.name} "
                                              f"{same}), phase 3 committed{also}")
    return {3: committed}, f"committed {committed.name} (phase 3); phase 2 not in {work}{also}"


def speed(name:str, serving:dict, prompt:str, tokens:int, repeats:int=3) -> float:
    "Median decode tok/s of the rung served by a Session: greedy, `tokens` after `prompt`"
    from edge0.session import Session
    from edge0.streaming import StreamOptions
    serving = dict(serving)
    low = {key: serving.pop(key) for key in ('low_bits', 'low_below') if key in serving}  # lower-bit rungs' options
    if low: serving['options'] = StreamOptions(**low)
    with Session(serving.pop('model', name), **serving) as s:
        tps = []
        s.generate(prompt, max_tokens=8, chat=False, keep=False)  # warm-up
        for _ in range(repeats):
            s.generate(prompt, max_tokens=tokens, chat=False, keep=False)
            tps.append(s.last['generation_tps'])
    return float(np.median(tps))

def table(results) -> str:
    "The ladder as text: one block per teacher and K"
    lines = [results['header']]
    for run in results['runs']:
        rows, rec = run['rows'], recovered(run['rows'], run['k'])
        lines += ['', f"{run['teacher']} K={run['k']} (adapters: {run['adapters']})",
                  f"  {'rung':<36}{'ppl':>8}{'top-1':>8}{'KL':>8}{'recovered':>11}{'tok/s':>8}{'repeats':>9}"]
        for r in rows:
            share = f"{rec[r['rung']]:.0%}" if r['rung'] in rec else ''
            lines.append(f"  {r['rung']:<36}{r['ppl']:>8.1f}{r['agreement']:>8.3f}{r['kl']:>8.4f}{share:>11}"
                         f"{r['tok_s']:>8.1f}{r['sample']['repetition']:>9.2f}")
        for rung, goal in TARGETS.get(run['teacher'], {}).items():
            if rung not in rec: continue  # no adapter trained at exact top-1 in this run
            got = rec[rung]
            lines.append(f"  target: {rung} recovers >= {goal:.0%}: {got:.0%} ({'met' if got >= goal else 'missed'})")
        if run.get('reproduced'): lines.append(f"  against the previous committed ladder: {run['reproduced']}")
        lines += [f"    {r['rung']:<34} {r['sample']['text']!r}" for r in rows]
    return '\n'.join(lines)

def plot(results, path):
    "KL per rung (bars) and decode tok/s (dots), one panel per teacher and K; small enough to commit"
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    runs = results['runs']
    fig, axes = plt.subplots(2, (len(runs) + 1) // 2, figsize=(3.4 * ((len(runs) + 1) // 2), 6.4))
    for ax, run in zip(axes.T.ravel(), runs):
        rows = run['rows']
        x = np.arange(len(rows))
        colors = ['tab:gray' if 'LoRA' not in r['rung'] and 'exact' not in r['rung'] else
                  'tab:green' if 'LoRA' in r['rung'] else 'tab:blue' for r in rows]
        ax.bar(x, [r['kl'] for r in rows], color=colors)
        ax.set_title(f"{run['teacher']} K={run['k']}", fontsize=8)
        ax.set_xticks(x, [r['rung'].replace('+ ', '') for r in rows], rotation=70, ha='right', fontsize=6)
        ax.tick_params(axis='y', labelsize=6)
        ax.set_ylabel('KL to bf16', fontsize=7)
        tx = ax.twinx()
        tx.plot(x, [r['tok_s'] for r in rows], 'k.', ms=4)
        tx.set_ylim(0, None)
        tx.tick_params(axis='y', labelsize=6)
        tx.set_ylabel('decode tok/s (dots)', fontsize=7)
    for ax in axes.T.ravel()[len(runs):]: ax.axis('off')
    fig.tight_layout()
    fig.savefig(path, dpi=60)

def reproduced(previous:dict, run:dict) -> str:
    "How far this run's rungs are from the same rungs of the previous committed ladder (same teacher, K, adapters)"
    old = next((r for r in previous.get('runs', []) if (r['teacher'], r['k']) == (run['teacher'], run['k'])), None)
    if old is None: return ''
    was = {r['rung']: r['kl'] for r in old['rows']}
    same = [r for r in run['rows'] if r['rung'] in was and (r['rung'] != '+ phase-2 LoRA')]
    if 'committed' not in run['adapters']: same = [r for r in same if 'LoRA' not in r['rung']]
    if not same: return ''
    worst = max(abs(r['kl'] - was[r['rung']]) for r in same)
    return f"{len(same)} rungs ({', '.join(r['rung'] for r in same)}): max |KL difference| {worst:.1e}"

def main(argv=None):
    a = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    a.add_argument('--work', default=str(ROOT / 'build/teachers'), help='work folder of `edge0 train` (stage files)')
    a.add_argument('--windows', type=int, default=24, help='held-out windows of 256 tokens per rung')
    a.add_argument('--tokens', type=int, default=64, help='tokens per decode-speed generation')
    a.add_argument('--low', type=lambda t: tuple(int(b) for b in t.split(',')), default=(), metavar='B[,B]',
                   help='add the lower-bit rungs at these bits (bench/low_bits.py measures the code teacher\'s)')
    a.add_argument('--runs', nargs='+', metavar='TEACHER:K', help='only these (default: all six)')
    a.add_argument('--out', default=str(ROOT / 'bench/results/quality_ladder'))
    args = a.parse_args(argv)
    from edge0.ladder import ladder, prompt_for
    from edge0.teachers import blas_in_use
    runs_to_do = [(t.split(':')[0], int(t.split(':')[1])) for t in args.runs] if args.runs else RUNS
    out = Path(args.out)
    previous = json.loads(out.with_suffix('.json').read_text()) if out.with_suffix('.json').exists() else {}
    t0, runs = time.time(), []
    for name, k in runs_to_do:
        files, source = adapters_for(name, k, args.work)
        rows = ladder(name, k, args.work, adapters=files, windows=args.windows, low=args.low, low_top=min(2, k - 1))
        for r in rows:
            r['tok_s'] = speed(name, r['serving'], prompt_for(name), args.tokens)
            print(f"  {r['rung']:<36} {r['tok_s']:.1f} tok/s", flush=True)
        runs.append(dict(teacher=name, k=k, adapters=source, rows=rows))
        runs[-1]['reproduced'] = reproduced(previous, runs[-1])
    header = (f"quality ladder, {time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores, BLAS "
              f"{blas_in_use()}: {args.windows} held-out windows x 256 tokens per rung (each teacher's own excerpt), "
              f"decode tok/s of {args.tokens} greedy tokens (median of 3); {time.time() - t0:.0f} s")
    results = dict(header=header, runs=runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix('.json').write_text(json.dumps(results, indent=1))
    out.with_suffix('.txt').write_text(table(results) + '\n')
    plot(results, out.with_suffix('.png'))
    print(table(results))

if __name__ == '__main__':
    sys.exit(main())
