"""Phase 1 of a 48-layer model on this machine, against the one-hour target (issue 49).

    python bench/phase1_time.py                        # build (once) the 48-layer synthetic and run phase 1 on it
    python bench/phase1_time.py --layers 4 --tokens 4096 --out /tmp/p1  # a small shape, to check the script works
    python bench/phase1_time.py --model DIR            # phase 1 of a checkpoint you have
    python bench/phase1_time.py --capture mlx          # capture through the MLX graph (default: auto, the torch step here)

The checkpoint is 48 layers of the 16-layer shape the other CPU benchmarks use (memory_budget.SHAPE_16L: 128 experts,
top-8, hidden 1024, expert FFN 512; edge0.zoo.build_synthetic with routing calibrated to trained MoEs', about 5.5 GB)
in its torch-cpu conversion (memory_budget.checkpoint; built and converted under build/bench where missing). Its routing
statistics are printed first: degenerate routing would make the heads' recall meaningless. Then `edge0.heads.train_heads`
runs as `edge0 train DIR --phase heads` does (the default recipe, the default budget, the trainer it picks here), in
this process, with a fresh scratch folder; the run prints what it expects before it starts. Printed after: the wall time
of each part (expert reads, the rest of the capture, training; the capture's seconds a layer, and which pass captured:
the torch step's layers or the MLX graph, `--capture`) and the total against 3,600 s, what the run expected, and
per head its held-out recall against the temporal-locality baseline (layer N+1's experts at t reused at t+1) and the
steps early stopping let it take. Writes --out.txt and .json (default bench/results/phase1_time).
"""
import argparse, json, shutil, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_budget import SHAPE_16L, checkpoint  # noqa: E402  built and converted where missing
from edge0.heads import RECIPE, train_heads  # noqa: E402
from edge0.routing_stats import checkpoint_routing, format_routing  # noqa: E402
from edge0.serving import Serving  # noqa: E402
from edge0.store import model_spec, read_header  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 3600

def report(meta:dict, wall:float, layers:int) -> tuple:
    "`(text, figures)` of a phase-1 run from its heads' metadata"
    t, heads = json.loads(meta['time']), json.loads(meta['heldout_recall'])
    recipe = json.loads(meta['recipe'])
    parts = dict(reads=t['read_s'], capture=t['capture_s'], training=t['train_s'])
    # every layer up to the last head's target is captured (that one to its router)
    captured = max(int(n) for n in heads) + 2
    lines = [f"phase 1 of a {layers}-layer model: {len(heads)} heads, {int(meta['train_tokens']):,} training tokens, "
             f"capture {recipe['capture']}, trainer {recipe['trainer']}, patience {recipe['patience']}, "
             f"validation {recipe['val']:g}",
             *(f"{name:>10}: {s:>8.0f} s" for name, s in parts.items()),
             f"{'capture':>10}: {t['capture_s'] / captured:>8.2f} s a layer ({captured} layers)",
             f"{'total':>10}: {wall:>8.0f} s wall ({wall / TARGET_S:.2f} of the one-hour target: "
             f"{'within' if wall <= TARGET_S else 'OVER'}); the run expected at most {t.get('expected_s') or 0:.0f} s",
             f"{'head':>8}{'recall':>8}{'reuse':>8}{'steps':>7}{'best':>6}"]
    lines += [f"{f'{n}->{int(n) + 1}':>8}{r['head']:>8.3f}{r['reuse']:>8.3f}{r['steps']:>7}{r['best_step']:>6}"
              for n, r in heads.items()]
    better = sum(r['head'] > r['reuse'] for r in heads.values())
    lines.append(f"heads above the temporal-locality baseline: {better} of {len(heads)}")
    return '\n'.join(lines), dict(parts=parts, capture_layer_s=round(t['capture_s'] / captured, 2),
                                  wall_s=round(wall, 1), expected_s=t.get('expected_s'), heads=heads,
                                  recipe=recipe, layers=layers, within=wall <= TARGET_S)

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--layers', type=int, default=48, help='layers of the synthetic checkpoint (default 48)')
    ap.add_argument('--model', help='a checkpoint to run instead of the synthetic one')
    ap.add_argument('--tokens', type=int, default=RECIPE['tokens'], help='calibration tokens (default: the recipe)')
    ap.add_argument('--capture', default='auto', choices=('auto', 'mlx', 'torch'),
                    help="the capture's pass (the recipe's; default auto: the torch step's layers where they serve the model)")
    ap.add_argument('--bench-dir', default=str(ROOT / 'build' / 'bench'))
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'phase1_time'))
    a = ap.parse_args()
    shape = dict(SHAPE_16L, num_layers=a.layers, routing='calibrated')
    model = Path(a.model) if a.model else checkpoint(Path(a.bench_dir) / f"qwen3moe-{a.layers}l-calibrated", shape)
    print(format_routing(checkpoint_routing(model, 256), str(model)), flush=True)
    work = Path(tempfile.mkdtemp(prefix='phase1-time-'))
    try:
        t0 = time.time()
        heads = train_heads(model, Serving(), work=work / 'work', dst=work, tokens=a.tokens, capture=a.capture)
        wall = time.time() - t0
        text, figures = report(read_header(heads)[1], wall, model_spec(model).num_layers)
    finally: shutil.rmtree(work, ignore_errors=True)
    print(text)
    Path(a.out + '.txt').write_text(text + '\n')
    Path(a.out + '.json').write_text(json.dumps(dict(figures, model=str(model)), indent=1))
