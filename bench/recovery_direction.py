"""Why the code teacher's adapters recover so little of the ladder's KL: the direction of the divergence.

    python bench/recovery_direction.py          # after `make adapters` (the stage files in build/teachers); about 10 min

The ladder (bench/quality_ladder.py) reports the forward KL(teacher || served) a rung leaves. Phase 3 trains the adapter
on the reverse KL(served || teacher) of text the student wrote, which is mode-seeking: it can fall while the forward KL
stays. This runs the ladder's rungs of edge0-tiny-code at K=8 and K=4 with exact top-1 (`edge0.ladder.ladder`, the same
held-out windows, the same adapters as the ladder finds them) and reports, for each rung after routing, the share of each
direction's routing-replacement gap that it recovers (against int4 under its own routing at the same K).
It also measures, at exact top-2, which adapter a served `--exact-top 2` should load: none, the plain phase-3 adapter
(trained on `routing`), or the one trained at exact top-1 (the forward KL on the same windows).
Writes bench/results/recovery_direction.txt and .json.
"""
import argparse, json, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'bench'))
from quality_ladder import adapters_for, recovered

def at_exact_two(name:str, k:int, windows:int) -> dict:
    "KL(teacher || served) at exact top-2 with no adapter, the plain phase-3 adapter and the one trained at exact top-1"
    from edge0.streaming import load_resident
    from edge0.files import teacher_path
    from edge0.lora import adapter_file, load_adapter
    from edge0.prerouter import heads_file, load_prerouter
    from edge0.quality import heldout_windows, rung_metrics
    from edge0.recovery import StudentPath, load_teacher
    from edge0.store import model_spec
    base = teacher_path(name)
    spec, teacher = model_spec(base), load_teacher(name)
    h = load_resident(base, spec)  # as served: the backend's dtype, the cast_predicate's parameters float32
    model, tokenizer = h.model, h.tokenizer
    data, heads = heldout_windows(tokenizer, 256, windows, name), heads_file(base, spec, k)
    out = {}
    with StudentPath(model, spec, load_prerouter(base, spec, k, heads), k, keep=2, ranked=True) as student:
        served = lambda x: student.from_start(x, 1)
        out['none'] = rung_metrics(served, teacher, data)['kl']
        for label, m in (('plain', 0), ('trained at exact top-1', 1)):
            with load_adapter(model, base, spec, k, heads, base / adapter_file(k, m)):
                out[label] = rung_metrics(served, teacher, data)['kl']
    return out

def main(argv=None):
    a = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    a.add_argument('--work', default=str(ROOT / 'build/teachers'))
    a.add_argument('--windows', type=int, default=24)
    a.add_argument('--out', default=str(ROOT / 'bench/results/recovery_direction'))
    args = a.parse_args(argv)
    from edge0.ladder import ladder
    t0, runs, lines = time.time(), [], []
    for k in (8, 4):
        files, source = adapters_for('edge0-tiny-code', k, args.work)
        rows = ladder('edge0-tiny-code', k, args.work, adapters=files, windows=args.windows, sample=8, exact=(1,),
                      show=False)
        fwd, rev = recovered(rows, k), recovered(rows, k, 'reverse_kl')
        two = at_exact_two('edge0-tiny-code', k, args.windows)
        runs.append(dict(k=k, adapters=source, rows=rows, forward=fwd, reverse=rev, exact_two=two))
        lines += ['', f"edge0-tiny-code K={k} (adapters: {source})",
                  f"  {'rung':<36}{'KL(t||s)':>10}{'recovered':>11}{'KL(s||t)':>10}{'recovered':>11}"]
        for r in rows:
            f, b = (f"{d[r['rung']]:.0%}" if r['rung'] in d else '' for d in (fwd, rev))
            lines.append(f"  {r['rung']:<36}{r['kl']:>10.4f}{f:>11}{r['reverse_kl']:>10.4f}{b:>11}")
        lines.append(f"  exact top-2, KL(t||s) by the adapter loaded: " + ', '.join(f"{a} {v:.4f}" for a, v in two.items()))
    header = (f"forward and reverse KL of the code teacher's rungs, {time.strftime('%Y-%m-%d')}, {args.windows} held-out "
              f"windows x 256 tokens; {time.time() - t0:.0f} s")
    text = '\n'.join([header, *lines])
    print(text)
    Path(args.out + '.txt').write_text(text + '\n')
    Path(args.out + '.json').write_text(json.dumps(dict(header=header, runs=runs), indent=1))

if __name__ == '__main__':
    sys.exit(main())
