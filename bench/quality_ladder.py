"""The quality ladder of the recovery LoRA, measured in one run: for each committed teacher and serving K, the bf16 teacher,
int4, int4 with K narrowed (own routing), int4 with the prerouter's routing, and the phase-2 and phase-3 adapters on top.

    python bench/quality_ladder.py                   # after `make adapters`; writes bench/results/quality_ladder.{json,txt}
    python bench/quality_ladder.py --windows 8       # a quicker look

Per rung: held-out perplexity, top-1 agreement with the teacher, mean KL(teacher || served) per token, and a greedy sample
with its 4-gram repetition. The adapters are the stage files `edge0 train --phase 2|3` leaves in the work folder.
"""
import argparse, json, os, platform, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = (('edge0-tiny', 8), ('edge0-tiny', 4), ('edge0-tiny-ds', 4), ('edge0-tiny-ds', 2))

def table(results) -> str:
    "The ladder as text: one block per teacher and K"
    lines = [results['header']]
    for run in results['runs']:
        rows = run['rows']
        routed = next(r for r in rows if r['rung'] == '+ prerouter routing')['kl']
        lines += ['', f"{run['teacher']} K={run['k']}",
                  f"  {'rung':<28}{'ppl':>8}{'top-1':>8}{'KL':>8}{'recovered':>11}{'repeats':>9}"]
        for r in rows:
            rec = f"{(routed - r['kl']) / routed:.0%}" if 'LoRA' in r['rung'] else ''
            lines.append(f"  {r['rung']:<28}{r['ppl']:>8.1f}{r['agreement']:>8.3f}{r['kl']:>8.4f}{rec:>11}"
                         f"{r['sample']['repetition']:>9.2f}")
        lines += [f"    {r['rung']:<26} {r['sample']['text']!r}" for r in rows]
    return '\n'.join(lines)

def main(argv=None):
    a = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    a.add_argument('--work', default=str(ROOT / 'build/teachers'), help='work folder of `edge0 train` (stage files)')
    a.add_argument('--windows', type=int, default=24, help='held-out windows of 256 tokens per rung')
    a.add_argument('--out', default=str(ROOT / 'bench/results/quality_ladder'))
    args = a.parse_args(argv)
    from edge0.ladder import ladder
    from edge0.teachers import blas_in_use
    t0 = time.time()
    runs = [dict(teacher=name, k=k, rows=ladder(name, k, args.work, windows=args.windows)) for name, k in RUNS]
    header = (f"quality ladder, {time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores, BLAS "
              f"{blas_in_use()}: {args.windows} held-out windows x 256 tokens per rung; {time.time() - t0:.0f} s")
    results = dict(header=header, runs=runs)
    Path(args.out).with_suffix('.json').write_text(json.dumps(results, indent=1))
    Path(args.out).with_suffix('.txt').write_text(table(results) + '\n')
    print(table(results))

if __name__ == '__main__':
    sys.exit(main())
