"""The prerouter across storage tiers: off / routing / prefetch / oracle at K=8 and K=4 on nvme (unthrottled), sata (500 MB/s),
emmc (277 MB/s) and usb (38 MB/s), for edge0-tiny and the synthetic 2.2 GB Qwen3-MoE-shaped checkpoint, by the harness (edge0.harness).

    python bench/tiers.py                          # both checkpoints, 3 rounds; writes bench/results/tiers.{txt,json,png}
    python bench/tiers.py --models tiny --rounds 2 --tokens 16

Conditions, as in the prerouter A/B: the synthetic checkpoint runs every arm in a child memory cgroup capped at half its size
(no swap) with a 256 MiB expert pool; edge0-tiny (6.4 MiB, dwarfed by the runtime a cap must leave room for) evicts its experts
from the page cache before every step, with a pool of 1/8 of its experts. The compute-only step (every expert resident, edge0's
block at K) is measured in the same invocation, without cap or throttle. Per tier and K: each mode's speedup over off next to its
bound, off's step / max(compute-only step, MB per step / the tier's measured bandwidth).
"""
import argparse, json, sys, time
import numpy as np
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from edge0.conditions import TIERS
from edge0.harness import Arm, run, sweep, table, speedup_table, speedups, plot_tiers, save  # noqa: E402
from edge0.files import teacher_path  # noqa: E402
from edge0.store import ExpertStore  # noqa: E402

MODES = ('off', 'routing', 'prefetch', 'oracle')

def checkpoints(a):
    "(name, model dir, arm options, run options) of each checkpoint"
    out = []
    for name in a.models.split(','):
        if name == 'tiny':
            m = teacher_path('edge0-tiny')
            st = ExpertStore(m); pool = 48 * st.expert_nbytes / 2**20; st.close()  # 48 bundles: 1/8 of the experts
            out.append(('edge0-tiny', m, dict(pool_mib=pool, cold_steps=True), {}))
        elif name == 'synthetic':
            m = Path(a.synthetic)
            if not (m / 'config.json').exists(): raise SystemExit(f"{m} is missing: run bench/prerouter_ab.py once to build it")
            size = sum(f.stat().st_size for f in m.glob('*.safetensors'))
            # its prompt's experts are most of the checkpoint: the tiers throttle its decode, not its prefill
            out.append((f"synthetic {size / 2**30:.1f} GiB", m, dict(pool_mib=256),
                        dict(cap_mb=size / 2 / 2**20, throttle_prefill=False)))
        else: raise SystemExit(f"--models: unknown checkpoint {name!r}; expected tiny and/or synthetic")
    return out

def routing_traces(model, ks, n=256):
    "`{k: (n, layers, k) expert ids}` as the model routes the held-out excerpt (the explorer's LRU replays them)"
    from edge0.conditions import sequence
    from edge0.routing_stats import routing_trace
    from edge0.streaming import load_resident
    h = load_resident(model)  # as served: the backend's dtype, the cast_predicate's parameters float32
    spec, model_ = h.spec, h.model
    ids = np.array(sequence(model, n + 1))
    out = {}
    for k in ks:
        t = routing_trace(model_, spec, ids, k, seq=n)
        out[k] = np.stack([t[l] for l in spec.moe_layers], axis=1).astype(np.uint16)
    return out

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--models', default='tiny,synthetic')
    ap.add_argument('--synthetic', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-2g'))
    ap.add_argument('--tiers', default=','.join(TIERS))
    ap.add_argument('--ks', default='8,4')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--tokens', type=int, default=24)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'tiers'))
    a = ap.parse_args()
    ks, tiers = [int(k) for k in a.ks.split(',')], a.tiers.split(',')
    lines, report = [], dict(date=time.strftime('%Y-%m-%d %H:%M'), models={})
    def say(s=''): print(s, flush=True); lines.append(s)
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    cks, traces = checkpoints(a), {}
    fig, axs = plt.subplots(len(cks), len(ks), figsize=(5 * len(ks), 3.4 * len(cks)), squeeze=False)
    for row, (name, m, arm_kw, run_kw) in enumerate(cks):
        say(f"\n=== {name}: {m}")
        comp = run([Arm(m, 'compute', k) for k in ks], a.tokens, rounds=a.rounds, cache='warm', out=ROOT / 'build' / 'harness')
        say('compute-only step (every expert resident, no cap, no throttle):\n' + table(comp))
        compute = {k: comp['results'][f"compute/K{k}"]['step_ms'] for k in ks}
        arms = [Arm(m, mode, k, **arm_kw) for k in ks for mode in MODES]
        res = sweep(arms, tiers, tokens=a.tokens, rounds=a.rounds, cache='cold', out=ROOT / 'build' / 'harness',
                    routing=comp['routing'], **run_kw)
        for t, rep in res.items(): say(f"\n-- tier {t}\n{table(rep)}")
        say(f"\n{name}: speedup over off by tier (bound: off's step / max(compute-only step, MB per step / bandwidth))")
        say(speedup_table(res, ks, compute))
        nvme = res['nvme']['measured_mb_s'] if 'nvme' in res else None
        for col, k in enumerate(ks): plot_tiers(speedups(res, k, compute[k], nvme), f"{name}, K={k}", axs[row][col])
        st = ExpertStore(m); nbytes = st.expert_nbytes; st.close()
        report['models'][name] = dict(model=str(m), expert_bytes=nbytes, compute=comp, compute_ms=compute, tiers=res)
        traces.update({f"{name}|k{k}": t for k, t in routing_traces(m, ks).items()})
    fig.tight_layout(); fig.savefig(a.out + '.png', dpi=110)
    save(report, a.out + '.json')
    np.savez_compressed(a.out + '-traces.npz', **traces)
    Path(a.out + '.txt').write_text('\n'.join(lines) + '\n')
    print(f"\nwrote {a.out}.txt, .json and .png")

if __name__ == '__main__': main()
