"""A phase-1 head's training step on this CPU: MLX against torch (edge0.heads.MLXHead, TorchHead), per step.

    python bench/phase1_step.py

Head shapes: edge0-tiny's (hidden 128, 64 experts, K=8) and the 16-layer CPU benchmarks' (hidden 1024, 128 experts,
K=8); the recipe's head (512 hidden), batch (512) and loss (KL plus the routing-weighted term), on random captures (a
step's arithmetic does not depend on the values). Three warm-up steps, then 15 timed, per trainer. Prints ms a step.
"""
import dataclasses, time
import numpy as np
from edge0.backend import core as B
from edge0.files import teacher_path
from edge0.heads import RECIPE, TRAINERS
from edge0.prerouter import Prerouter, head_batch, pair_positions
from edge0.store import model_spec

tiny = model_spec(teacher_path('edge0-tiny'))
for label, spec in (('edge0-tiny', tiny), ('hidden 1024, E=128', dataclasses.replace(tiny, hidden_size=1024,
                                                                                   num_experts=128, k=8))):
    D, E, k, T = spec.hidden_size, spec.num_experts, spec.k, 8192
    rng = np.random.default_rng(0)
    caps = (rng.normal(size=(T, D)).astype(np.float32), rng.integers(0, E, (T, k)).astype(np.int32),
            rng.normal(size=(T, E)).astype(np.float32), np.argsort(-rng.normal(size=(T, E)), -1)[:, :k].astype(np.int32))
    pos = pair_positions(T, RECIPE['seq'])
    for name, trainer in TRAINERS.items():
        B.seed(0)
        pr = Prerouter(spec, hidden=RECIPE['hidden'])
        n = pr.owners[0]
        tr = trainer(pr, n, caps, None, RECIPE['lr'], RECIPE['weighted'])
        for s in range(3): tr.step(head_batch(n, s, 0, pos, RECIPE['batch']))
        t0 = time.perf_counter()
        for s in range(3, 18): tr.step(head_batch(n, s, 0, pos, RECIPE['batch']))
        print(f"{label:>20} (d_in {D + 2 * E}, E {E}) {name:>6}: {1000 * (time.perf_counter() - t0) / 15:.1f} ms a step",
              flush=True)
