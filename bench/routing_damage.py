"""What routing replacement costs on the committed teachers, and what better heads would buy: the measurements behind
the quality ladder's verdict (05d_ladder), in one run.

    python bench/routing_damage.py                    # about 45 min with OpenBLAS; writes bench/results/routing_damage.{json,txt}
    python bench/routing_damage.py --recovery-steps 0 # without the two phase-2 runs (about 10 min)

1. Head recall by teacher confidence. On the held-out excerpt, per owner layer: the heads' top-K recall of the next layer's
   routing one token ahead, and how often the routed expert the next layer weighs most is among the predicted, split by the bf16
   teacher's probability of its own next token (how predictable the next token is).
2. The keep curve. The served KL(teacher || served) and top-1 agreement when every predicted set is made to hold the
   layer's own `keep` heaviest experts (`StudentPath(keep=...)`), keep = 0 (the heads as they are) .. K (own routing):
   what heads that never miss those experts would serve.
3. Recovery against damage (`--recovery-steps`, default the phase-2 recipe's steps). Phase 2 of edge0-tiny at K=8, run
   from scratch three times in this process's work folder: on the heads as they are (keep 0), on heads that never miss
   the two heaviest experts (keep 2), and on perfect heads (keep 8: int4 under its own routing, the floor any heads
   reach); the KL before and after each (8 held-out windows), and the share recovered.
"""
import argparse, json, os, platform, shutil, sys, time
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RUNS = (('edge0-tiny', 8), ('edge0-tiny', 4), ('edge0-tiny-ds', 4), ('edge0-tiny-ds', 2))
BINS = (0.0, 0.1, 0.2, 0.4, 0.6, 1.01)

def _bin_label(lo, hi): return f"[{lo:.1f},{min(hi, 1):.1f}{']' if hi > 1 else ')'}"

def _load(name:str, k:int):
    "The committed int4 base of teacher `name` (as served, MLX kernels), its spec, tokenizer, heads at `k`, bf16 teacher"
    from edge0.streaming import load_resident
    from edge0.files import teacher_path
    from edge0.prerouter import load_prerouter
    from edge0.recovery import load_teacher
    from edge0.store import model_spec
    base = teacher_path(name)
    spec = model_spec(base)
    h = load_resident(base, spec)  # as served: the backend's dtype, the cast_predicate's parameters float32
    model, tok = h.model, h.tokenizer
    return model, spec, tok, load_prerouter(base, spec, k), load_teacher(name)

def confidence(loaded:tuple, k:int, windows:int) -> dict:
    "Per owner layer: head recall and heaviest-expert capture, overall and per bin of the teacher's next-token probability"
    from edge0.backend import core as B
    from edge0.prerouter import capture, pairs, pair_positions, route, router_bias_of
    from edge0.recovery import log_softmax
    from edge0.routing import weigh
    from edge0.files import heldout_ids
    model, spec, tok, heads, teacher = loaded
    seq = 256
    ids = heldout_ids(tok, dtype=np.int64)[:windows * seq]
    cap = capture(spec, model, ids, k, seq)
    conf = np.concatenate([np.array(B.exp(log_softmax(teacher(B.array(ids[None, i:i + seq].astype(np.int32)))
                                                      .astype(B.float32))[0]).max(-1)) for i in range(0, len(ids), seq)])
    c = conf[pair_positions(len(ids), seq)]
    masks = [(c >= lo) & (c < hi) for lo, hi in zip(BINS[:-1], BINS[1:])]
    out = dict(bins=[_bin_label(lo, hi) for lo, hi in zip(BINS[:-1], BINS[1:])],
               share=[float(m.mean()) for m in masks], layers={})
    for n in heads.owners:
        h, r, rp, target, true, _ = pairs(cap, n, heads.next_layer[n])
        pred = np.array(route(spec.routing, heads.predict(n, h, r, rp), k, router_bias_of(spec, model,
                                                                                     heads.next_layer[n]))[0])
        hit = (pred[:, :, None] == true[:, None, :]).any(-1).sum(-1) / k
        w = np.array(weigh(spec.routing, B.array(target), B.array(true)).astype(B.float32))
        heaviest = (pred == np.take_along_axis(true, w.argmax(-1)[:, None], -1)).any(-1)  # the routed expert weighing most
        out['layers'][str(n)] = dict(next=heads.next_layer[n], recall=float(hit.mean()), heaviest=float(heaviest.mean()),
                                     recall_by_bin=[float(hit[m].mean()) if m.any() else None for m in masks],
                                     heaviest_by_bin=[float(heaviest[m].mean()) if m.any() else None for m in masks])
    return out

def keep_curve(name:str, loaded:tuple, k:int, windows:int) -> list:
    "Rows `dict(keep, kl, agreement, ppl)` of the served path with each predicted set holding the `keep` heaviest experts"
    from edge0.quality import rung_metrics, heldout_windows as _windows
    from edge0.recovery import StudentPath
    model, spec, tok, heads, teacher = loaded
    data, rows = _windows(tok, 256, windows), []
    with StudentPath(model, spec, heads, k) as student:
        for keep in range(k + 1):
            student.keep = keep
            m = rung_metrics(student.from_start, teacher, data)
            rows.append(dict(keep=keep, kl=m['kl'], agreement=m['agreement'], ppl=m['ppl']))
            print(f"{name} K={k} keep {keep}: KL {m['kl']:.4f}", flush=True)
    return rows

def recovery(name:str, k:int, keep:int, steps:int|None, work:Path, corpus, windows:int) -> dict:
    "Phase 2 from scratch on the path whose predicted sets hold the `keep` heaviest experts; KL before and after"
    from edge0.quality import rung_metrics, heldout_windows as _windows
    from edge0.recovery import Recovery, load_teacher
    from edge0.serving import Serving
    run = Recovery(name, 2, Serving('routing', k), corpus, work, show=False, **({'steps': steps} if steps else {}))
    run.out = work / f"{name}-k{k}-keep{keep}-phase2-ckpt"
    if run.out.exists(): shutil.rmtree(run.out)
    run.student.keep = keep
    teacher, data = load_teacher(name), _windows(run.tokenizer, 256, windows)
    before = rung_metrics(run.student.from_start, teacher, data)
    t0 = time.time()
    run.run(ckpt_every=10 ** 9)
    seconds = time.time() - t0
    after = rung_metrics(run.student.from_start, teacher, data)
    shutil.rmtree(run.out, ignore_errors=True)
    out = dict(keep=keep, steps=run.step, seconds=round(seconds), kl_before=before['kl'], kl_after=after['kl'],
               recovered=(before['kl'] - after['kl']) / before['kl'])
    print(f"{name} K={k} keep {keep}: phase 2, {run.step} steps in {seconds:.0f} s: KL {before['kl']:.4f} -> "
          f"{after['kl']:.4f} ({out['recovered']:.0%})", flush=True)
    return out

def table(results) -> str:
    "The three measurements as text"
    lines = [results['header']]
    for run in results['runs']:
        conf, curve = run['confidence'], run['keep']
        lines += ['', f"{run['teacher']} K={run['k']}",
                  f"  head recall by the teacher's next-token probability (share of positions: "
                  + ', '.join(f"{b} {s:.0%}" for b, s in zip(conf['bins'], conf['share'])) + ')',
                  f"  {'owner->next':<12}{'recall':>8}{'heaviest':>10}   recall | heaviest expert predicted, per bin"]
        for n, layer in conf['layers'].items():
            fmt = lambda xs: ' '.join('  -  ' if x is None else f"{x:.2f}" for x in xs)
            lines.append(f"  {n + '->' + str(layer['next']):<12}{layer['recall']:>8.3f}{layer['heaviest']:>10.3f}   "
                         f"{fmt(layer['recall_by_bin'])} | {fmt(layer['heaviest_by_bin'])}")
        lines.append("  keep (heaviest experts forced into each predicted set): KL / top-1")
        lines.append('  ' + '  '.join(f"{r['keep']}: {r['kl']:.4f}/{r['agreement']:.3f}" for r in curve))
    for r in results.get('recovery', []):
        lines.append(f"\nphase 2 of {r['teacher']} K={r['k']} with keep {r['keep']}: {r['steps']} steps in {r['seconds']} s, "
                     f"KL {r['kl_before']:.4f} -> {r['kl_after']:.4f}, recovered {r['recovered']:.0%}")
    return '\n'.join(lines)

def main(argv=None):
    a = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    a.add_argument('--windows', type=int, default=24, help='held-out windows of 256 tokens (keep curve, confidence)')
    a.add_argument('--recovery-steps', type=int, default=None,
                   help='phase-2 steps of the recovery comparison (default: the recipe; 0 skips it)')
    a.add_argument('--corpus', default=str(ROOT.parent / 'shared/data/corpus'), help='folder of the licensed corpus')
    a.add_argument('--work', default=str(ROOT / 'build/routing_damage'), help='work folder (rows, checkpoints)')
    a.add_argument('--out', default=str(ROOT / 'bench/results/routing_damage'))
    args = a.parse_args(argv)
    from edge0.teachers import blas_in_use
    t0, runs = time.time(), []
    for name, k in RUNS:
        loaded = _load(name, k)  # the base, its heads and the teacher, once for both measurements
        runs.append(dict(teacher=name, k=k, confidence=confidence(loaded, k, args.windows),
                         keep=keep_curve(name, loaded, k, args.windows)))
    results = dict(runs=runs)
    if args.recovery_steps != 0:
        if not Path(args.corpus).is_dir(): sys.exit(f"corpus folder {args.corpus} does not exist (--corpus)")
        work = Path(args.work)
        results['recovery'] = [dict(teacher='edge0-tiny', k=8, **recovery('edge0-tiny', 8, keep, args.recovery_steps,
                                                                           work, args.corpus, 8)) for keep in (0, 2, 8)]
    results['header'] = (f"routing damage, {time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores, BLAS "
                         f"{blas_in_use()}: {args.windows} held-out windows x 256 tokens; {time.time() - t0:.0f} s")
    Path(args.out).with_suffix('.json').write_text(json.dumps(results, indent=1))
    Path(args.out).with_suffix('.txt').write_text(table(results) + '\n')
    print(table(results))

if __name__ == '__main__':
    sys.exit(main())
