"""Early stopping of the phase-1 heads: where each head would stop, and its held-out recall, against today's recipe.

    python bench/phase1_stopping.py                       # edge0-tiny K=8, edge0-tiny-ds K=4, a synthetic zoo model
    python bench/phase1_stopping.py --tokens 16384 --only edge0-tiny:8

One capture per model (the resident model over the bundled calibration set's training windows; the bundled teachers'
held-out excerpt, or the calibration set's held-out windows for the zoo model, scored), then per head two trainings from
the same warm start, by the torch trainer (`edge0.heads.TorchHead`, which follows MLX's steps to float32 rounding,
04c_heads): today's recipe (1,000 steps on every training window, the last weights kept), and the same steps on the
training windows less the validation split (the last `val` of them), with the validation KL and the held-out recall
measured at every evaluation (every `CKPT_EVERY` steps). From that one curve it prints, for each patience, the step each
head would stop at and the held-out recall of the best weights it keeps, against today's. Writes
bench/results/phase1_stopping.txt and .json (--add: beside the runs already there, so each run can stay short).
"""
import argparse, json, tempfile, time
from pathlib import Path
import numpy as np
from edge0.calib import calibration, default_documents
from edge0.files import heldout_ids, teacher_path
from edge0.heads import CKPT_EVERY, RECIPE, TorchHead, _val_split, fit_head
from edge0.prerouter import capture, init_prerouter, pair_positions, recall_report
from edge0.store import model_spec
from edge0.streaming import load_resident, open_tokenizer
from edge0.zoo import build_synthetic

ROOT = Path(__file__).resolve().parent.parent
RUNS = ('edge0-tiny:8', 'edge0-tiny-ds:4', 'synthetic:4')
PATIENCES = (1, 2, 3, 4, 6)

def model_dir(name:str, work:Path) -> Path:
    if name != 'synthetic': return teacher_path(name)
    return build_synthetic(work / 'synthetic', num_layers=6, num_experts=32, k=4, hidden=128, expert_size=128,
                           routing='calibrated', overwrite=True)

def captures(name:str, d:Path, k:int, tokens:int, seq:int) -> tuple:
    "`(spec, model, train capture, held-out capture)`: the resident model's captures"
    h = load_resident(d)
    tok = open_tokenizer(d)
    cal = calibration(tok, default_documents(), seq, tokens, 0.05, 0)
    # a quarter of the training tokens scored, as the recipe's default (`heldout_tokens`)
    held = (cal.heldout.ravel() if name == 'synthetic' else heldout_ids(tok))[:tokens // 4]
    return h.spec, h.model, capture(h.spec, h.model, cal.train.ravel(), k, seq), capture(h.spec, h.model, held, k, seq)

def curve(spec, model, train:dict, held:dict, k:int, n:int, params:dict, T:int, val:float) -> list:
    "`[(step, validation KL, held-out recall)]` of head `n` trained without stopping on the windows less the split"
    pr = init_prerouter(spec, model, (n,), params['hidden'], k, params['seed'])
    m = pr.next_layer[n]
    caps = (train[n]['h'], train[n]['routed'], train[m]['logits'], train[m]['routed'])
    tr = TorchHead(pr, n, caps, None, params['lr'], params['weighted'])
    fit, val_pos = _val_split(T, params['seq'], val)
    points = []
    def at(state):
        tr.sync()
        points.append((state['step'], tr.kl(val_pos) if len(val_pos) else None,
                       recall_report(pr, model, held, k, owners=[n])[n]['head']))
    state = dict(step=0, log=[], best_kl=float('inf'), best_step=0, since=0, best=None)
    fit_head(tr, n, pair_positions(fit, params['seq']), val_pos, dict(params, patience=0), state, at)
    at(state)
    return points

def stop_at(points:list, patience:int) -> tuple:
    "`(step stopped at, best step, its held-out recall)` of the patience rule applied to a curve"
    best, since = None, 0
    for step, kl, rec in points:
        if best is None or kl < best[1]: best, since = (step, kl, rec), 0
        else: since += 1
        if since >= patience: return step, best[0], best[2]
    return points[-1][0], best[0], best[2]

def run(name:str, k:int, tokens:int, work:Path, max_heads:int|None=None) -> dict:
    params, t0 = dict(RECIPE, tokens=tokens), time.time()
    spec, model, train, held = captures(name, model_dir(name, work), k, tokens, params['seq'])
    capture_s, T = time.time() - t0, len(train[spec.moe_layers[0]]['h'])
    heads = {}
    for n in spec.moe_layers[1:-1][:max_heads]:
        today = curve(spec, model, train, held, k, n, params, T, 0.0)[-1]
        points = curve(spec, model, train, held, k, n, params, T, params['val'])
        heads[n] = dict(today=today[2], points=points,
                        stops={p: stop_at(points, p) for p in PATIENCES})
        print(f"{name} K={k} head {n}: today {today[2]:.4f}; " + ', '.join(
            f"patience {p}: {s}/{b} {rec:.4f}" for p, (s, b, rec) in heads[n]['stops'].items())
            + '; validation KL ' + ' '.join(f"{kl:.3f}" for _, kl, _ in points[:8]) + ' ...', flush=True)
    return dict(model=name, k=k, tokens=T, capture_s=round(capture_s), train_s=round(time.time() - t0 - capture_s),
                heads=heads)

def report(results:list) -> str:
    lines = [f"Held-out top-K recall of each head: today's recipe ({RECIPE['steps']:,} steps, every training window) "
             f"against early stopping on a validation split of {RECIPE['val']:g} of the training windows, evaluated "
             f"every {CKPT_EVERY} steps; per patience: the step it stops at / its best step, and the recall of the best weights"]
    lines.append(f"{'model':>14}{'K':>3}{'head':>7}{'today':>8}" + ''.join(f"{f'patience {p}':>26}" for p in PATIENCES))
    for r in results:
        for n, h in r['heads'].items():
            today = h['today']
            cells = ''.join(f"{f'{s}/{b} {rec:.4f} ({rec - today:+.4f})':>26}" for s, b, rec in
                            (h['stops'][p] for p in PATIENCES))
            lines.append(f"{r['model']:>14}{r['k']:>3}{f'{n}->{n + 1}':>7}{h['today']:>8.4f}{cells}")
        lines.append(f"{'':>14}   {r['tokens']:,} training tokens; capture {r['capture_s']} s, training "
                     f"{r['train_s']} s (two curves a head)")
    for p in PATIENCES:
        diffs = [rec - h['today'] for r in results for h in r['heads'].values() for s, b, rec in [h['stops'][p]]]
        steps = [s for r in results for h in r['heads'].values() for s, b, rec in [h['stops'][p]]]
        lines.append(f"patience {p}: mean steps {np.mean(steps):.0f} of {RECIPE['steps']:,}; recall difference "
                     f"worst {min(diffs):+.4f}, mean {np.mean(diffs):+.4f}")
    return '\n'.join(lines)

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--only', nargs='+', default=RUNS, help='model:K runs (a bundled teacher, or synthetic)')
    ap.add_argument('--tokens', type=int, default=RECIPE['tokens'])
    ap.add_argument('--add', action='store_true', help="keep the runs already in --out's json, add these")
    ap.add_argument('--max-heads', type=int, help='train only the first N heads of each model')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'phase1_stopping'))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        results = [run(r.split(':')[0], int(r.split(':')[1]), a.tokens, Path(work), a.max_heads) for r in a.only]
    if a.add and Path(a.out + '.json').exists():
        kept = json.loads(Path(a.out + '.json').read_text())
        for r in kept:  # JSON keys are strings
            r['heads'] = {int(n): dict(h, stops={int(p): tuple(v) for p, v in h['stops'].items()})
                          for n, h in r['heads'].items()}
        results = kept + results
    text = report(results)
    print(text)
    Path(a.out + '.txt').write_text(text + '\n')
    Path(a.out + '.json').write_text(json.dumps(results, indent=1))
