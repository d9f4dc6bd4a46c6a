"""The prerouter's advantage, measured: decode modes off / routing / prefetch / oracle at K=8 and K=4, against the roofline bound.

    python bench/prerouter_ab.py                     # both checkpoints, 3 rounds, 32 decode steps per arm
    python bench/prerouter_ab.py --models tiny --rounds 5

Checkpoints: `edge0-tiny` (the committed int4 teacher with its committed phase-1 heads) and the synthetic 2.3 GB Qwen3-MoE-shaped
checkpoint of the streaming benchmark (random weights; its heads are warm-started and distilled here for a few seconds on its own
forward passes, cached beside it). Neither fits in what the run may keep of it:
  - synthetic: every arm runs in a child memory cgroup capped at half the checkpoint (no swap);
  - edge0-tiny (6.7 MB, dwarfed by the ~400 MB runtime a cap must leave room for): every arm evicts the checkpoint from the page
    cache at every step, so no step finds an expert there — what a checkpoint far larger than memory does.
Every arm is its own process, decodes the same token sequence (teacher-forced from the held-out excerpt), starts with the
checkpoint evicted from the page cache and an expert pool of the same size; arm order rotates every round; medians over rounds.
Per arm: decode tok/s, step ms, blocked ms/step, MB and loads per step, cold fraction, host syncs per step. Per K: the compute-only
step (all experts resident, mlx-lm's model with edge0's block at that K, no cap: it cannot fit under one), the cold read bandwidth
measured through the store, the roofline bound max(compute-only step, MB per step / bandwidth), and the targets:
routing within 1.15x of its bound; routing >= 1.3x faster than off where off's step / the bound allows >= 1.5x.
"""
import argparse, json, os, statistics, subprocess, sys, time
from pathlib import Path

from edge0.conditions import sequence
from edge0.harness import Arm, run, table
from edge0.measure import expert_reads

ROOT = Path(__file__).resolve().parent.parent
MODES = ('off', 'routing', 'prefetch', 'oracle')

OPENBLAS = [p for p in ('/usr/lib/x86_64-linux-gnu/libopenblas.so.0', '/usr/lib/aarch64-linux-gnu/libopenblas.so.0') if Path(p).exists()]

def synthetic_heads(model, ks):
    "Heads for the synthetic checkpoint (made once, in a child process: with OpenBLAS preloaded where Debian's is installed)"
    from edge0.routing import spec_for
    from edge0.prerouter import prerouter_file
    spec = spec_for(json.loads((model / 'config.json').read_text()))
    for k in ks:
        if (model / prerouter_file(spec, k)).exists(): continue
        print(f'  distilling heads for {model.name} at K={k} ...', flush=True)
        env = dict(os.environ, **({'LD_PRELOAD': OPENBLAS[0]} if OPENBLAS else {}))
        t0 = time.time()
        subprocess.run([sys.executable, __file__, '--make-heads', str(model), '--k', str(k)], env=env, check=True, timeout=7200)
        print(f'  done in {time.time() - t0:.0f} s', flush=True)

def make_heads(model, k):
    "Warm-started heads for the synthetic checkpoint, distilled briefly on its own forward passes over the excerpt"
    import numpy as np
    from edge0.prerouter import init_prerouter, capture, train_on_capture, save_prerouter
    from edge0.streaming import load_resident
    model = Path(model)
    h = load_resident(model)  # the served dtype rule (`streaming.cast_params`)
    spec, m = h.spec, h.model
    ids = np.array(sequence(model, 512))
    t0 = time.time(); cap = capture(spec, m, ids, k, seq=256); print(f'  captured {len(ids)} tokens in {time.time() - t0:.0f} s', flush=True)
    best = (float('inf'), None, None)
    for lr in (1e-4, 1e-5):  # random weights give large hidden states: the teacher's learning rate diverges here
        pr = init_prerouter(spec, m, owners=spec.moe_layers[:-1], k=k)
        log = train_on_capture(pr, cap, steps=60, batch=128, lr=lr, show=False, weighted=0)  # as its committed run (KL alone)
        print(f'  phase 1 at lr {lr:g}: KL {log[0]:.3f} -> {log[-1]:.3f}', flush=True)
        if log[-1] < min(best[0], log[0]): best = (log[-1], pr, lr)
    pr = best[1] or init_prerouter(spec, m, owners=spec.moe_layers[:-1], k=k)
    save_prerouter(pr, model, extra=dict(builder='bench/prerouter_ab.py', train_tokens=len(ids), steps=60 if best[1] else 0, lr=best[2]))

def bench(a, name, model, arm_kw, run_kw):
    "One checkpoint: the compute-only steps (no cap), then every mode at every K under the checkpoint's condition"
    print(f"\n=== {name}: {model}", flush=True)
    out = ROOT / 'build' / 'harness'
    comp = run([Arm(model, 'compute', k) for k in a.ks], a.tokens, a.prompt, a.rounds, cache='warm', out=out)
    print('compute-only step (every expert resident, no cap):\n' + table(comp), flush=True)
    bw = {k: expert_reads(model, k, 64)['mb_s'] * 1e6 / 2**20 for k in a.ks}  # cold, K experts of a layer at a time
    rep = run([Arm(model, m, k, **arm_kw) for k in a.ks for m in MODES], a.tokens, a.prompt, a.rounds, cache='cold',
              out=out, routing=comp['routing'], **run_kw)
    print(table(rep), flush=True)
    rows = {}
    for k in a.ks:
        res, compute = rep['results'], comp['results'][f"compute/K{k}"]['step_ms']
        off = res[f"off/K{k}"]['step_ms']
        print(f"\n  K={k}: compute-only step {compute:.1f} ms; cold read bandwidth through the store {bw[k]:.0f} MiB/s")
        print(f"  {'mode':9}{'step ms':>8}{'bound ms':>9}{'x bound':>8}{'vs off':>7}")
        for m in MODES:
            r = res[f"{m}/K{k}"]
            if not r['rounds']: print(f"  {m:9} failed every round"); continue
            bound = max(compute, 1e3 * r['mb_per_step'] / bw[k])
            rows[f"{m}/K{k}"] = dict(r, bound_ms=bound)
            print(f"  {m:9}{r['step_ms']:>8.1f}{bound:>9.1f}{r['step_ms'] / bound:>8.2f}{off / r['step_ms']:>7.2f}")
        if not res[f"routing/K{k}"]['rounds']: continue
        rb, got = rows[f"routing/K{k}"]['bound_ms'], off / res[f"routing/K{k}"]['step_ms']
        within, allow = res[f"routing/K{k}"]['step_ms'] / rb, off / rb
        rows[f"compute/K{k}"] = dict(step_ms=compute, read_mib_s=bw[k], allowed_speedup=allow, routing_speedup=got)
        print(f"  bound allows {allow:.2f}x over off (off {off:.1f} ms / routing's bound {rb:.1f} ms); routing gets {got:.2f}x")
        print(f"  target: routing within 1.15x of its bound: {within:.2f}x -> {'MET' if within <= 1.15 else 'NOT MET'}")
        print("  target: routing >= 1.3x faster than off where the bound allows >= 1.5x: "
              + (f"{got:.2f}x -> {'MET' if got >= 1.3 else 'NOT MET'}" if allow >= 1.5 else f"bound allows {allow:.2f}x < 1.5x -> not applicable"))
    return dict(rows=rows, report=rep, compute=comp)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--models', default='tiny,synthetic')
    ap.add_argument('--synthetic', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-2g'))
    ap.add_argument('--synthetic-pools', default='256,32', help='expert pool sizes (MiB) to run the synthetic checkpoint with')
    ap.add_argument('--ks', default='8,4')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--tokens', type=int, default=32)
    ap.add_argument('--prompt', type=int, default=16)
    ap.add_argument('--json', default=str(ROOT / 'bench' / 'results' / 'prerouter_ab.json'))
    ap.add_argument('--make-heads'); ap.add_argument('--k', type=int)
    a = ap.parse_args()
    if a.make_heads: return make_heads(a.make_heads, a.k)
    a.ks = [int(k) for k in a.ks.split(',')]
    from edge0.files import teacher_path
    from edge0.store import ExpertStore
    out = {}
    for name in a.models.split(','):
        if name == 'tiny':
            m = teacher_path('edge0-tiny')
            st = ExpertStore(m); pool = 48 * st.expert_nbytes / 2**20; st.close()  # 48 bundles: 1/8 of the experts
            out['edge0-tiny'] = bench(a, 'edge0-tiny (experts evicted before every step)', m, dict(pool_mib=pool, cold_steps=True), {})
        elif name == 'synthetic':
            m = Path(a.synthetic)
            if not (m / 'config.json').exists():
                from edge0.zoo import build_synthetic
                print(f'building {m} ...', flush=True); build_synthetic(m)
            synthetic_heads(m, a.ks)
            size = sum(f.stat().st_size for f in m.glob('*.safetensors'))
            for mb in (float(x) for x in a.synthetic_pools.split(',')):
                out[f"synthetic, pool {mb:g} MiB"] = bench(a, f"synthetic, pool {mb:g} MiB, capped at half the checkpoint", m,
                                                           dict(pool_mib=mb), dict(cap_mb=size / 2 / 2**20))
        else: raise SystemExit(f"--models: unknown checkpoint {name!r}; expected tiny and/or synthetic")
    from edge0.harness import save
    save(dict(date=time.strftime('%Y-%m-%d %H:%M'), rounds=a.rounds, tokens=a.tokens, results=out), a.json)
    print(f"\nwrote {a.json}")

if __name__ == '__main__': main()
