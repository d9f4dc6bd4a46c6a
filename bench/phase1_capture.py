"""Phase 1's capture on this CPU, a batch at a time: the MLX graph's pass against the torch step's (edge0.heads.LayerPass,
TorchPass), on the same windows, the same input state and the same resident experts.

    python bench/phase1_capture.py                     # the 4-layer synthetic of phase1_time.py's shape (built if missing)
    python bench/phase1_capture.py --threads 1 --runs 10
    python bench/phase1_capture.py --model DIR         # a torch-cpu checkpoint you have

One batch of the recipe's windows (4 of 256 tokens) through one MoE layer (its experts read once and held, as
capture_layer holds them), the two passes alternating `--runs` times in this process after a warm-up each; prints the
minimum and median seconds a batch of each and their ratios. `--threads` sets torch's threads (and OMP/BLAS's, which
MLX's CPU backend uses) before anything runs: on cores other jobs share, two threads' barriers wait on descheduled
threads, and one thread per process measures the work more steadily. Writes --out.txt (default
bench/results/phase1_capture).
"""
import argparse, os, sys, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument('--model', help='a torch-cpu checkpoint (default: the 4-layer synthetic of phase1_time.py)')
ap.add_argument('--layer', type=int, default=1, help='the MoE layer the batches go through (default 1)')
ap.add_argument('--runs', type=int, default=8)
ap.add_argument('--threads', type=int, help="torch's and OMP/BLAS threads (default: theirs)")
ap.add_argument('--bench-dir', default=str(Path(__file__).resolve().parent.parent / 'build' / 'bench'))
ap.add_argument('--out', default=str(Path(__file__).resolve().parent / 'results' / 'phase1_capture'))
a = ap.parse_args()
if a.threads:  # read by OpenMP and the BLAS when they start: before torch and MLX are imported
    for var in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS'): os.environ[var] = str(a.threads)

import numpy as np, torch  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_budget import SHAPE_16L, checkpoint  # noqa: E402
from edge0.heads import RECIPE, capture_pass  # noqa: E402
from edge0.store import model_spec  # noqa: E402
from edge0.streaming import load as stream_load  # noqa: E402

if a.threads: torch.set_num_threads(a.threads)
model = Path(a.model) if a.model else checkpoint(Path(a.bench_dir) / 'qwen3moe-4l-calibrated',
                                                 dict(SHAPE_16L, num_layers=4, routing='calibrated'))
spec, seq = model_spec(model), RECIPE['seq']
rng = np.random.default_rng(0)
ids = rng.integers(0, 1000, (4, seq)).astype(np.int32)
state = rng.normal(size=(4, seq, spec.hidden_size)).astype(np.float32)  # times, not values
with stream_load(model, pool_bytes=2**31, kernels='torch') as h:
    passes = {c: capture_pass(spec, h, capture=c) for c in ('mlx', 'torch')}
    h.engine.keep_resident(a.layer)
    times = {c: [] for c in passes}
    for c, p in passes.items(): p.host(p(a.layer, ids, state)[0])
    for _ in range(a.runs):
        for c, p in passes.items():
            t0 = time.perf_counter()
            p.host(p(a.layer, ids, state)[0])
            times[c].append(time.perf_counter() - t0)
    for p in passes.values(): p.close()
lo, med = ({c: f(v) for c, v in times.items()} for f in (min, np.median))
lines = [f"{model.name}: one batch of 4 windows of {seq} tokens through MoE layer {a.layer}, {a.runs} runs a pass "
         f"alternating, threads {a.threads or torch.get_num_threads()}"]
lines += [f"{c:>6}: min {lo[c]:.3f} s, median {med[c]:.3f} s a batch" for c in times]
lines.append(f"mlx / torch: {lo['mlx'] / lo['torch']:.2f} (min), {med['mlx'] / med['torch']:.2f} (median)")
print('\n'.join(lines))
Path(a.out + '.txt').write_text('\n'.join(lines) + '\n')
