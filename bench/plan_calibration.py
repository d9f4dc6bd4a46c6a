"""The planner against the harness: predicted and measured decode tok/s, side by side, in one run.

    python bench/plan_calibration.py                  # every configuration, 3 rounds; writes bench/results/plan_calibration.*
    python bench/plan_calibration.py --only tiny --rounds 2

For each configuration (checkpoint x memory cap x storage tier x K x mode) this script
  1. measures this machine inside that tier and cap (edge0.plan.this_machine: the checkpoint's cold read rate, the store's
     expert reads at batch 1 and K, cold and warm, in a child cgroup; the mode's compute profile with every expert pooled,
     no cap, no throttle; the runtime's memory), the model's routing of the forced sequence and the sets its heads
     predict over it (teacher-forced);
  2. predicts decode tok/s with edge0.plan.plan from those alone;
  3. runs the arm by the harness's protocol (edge0.harness.run: own process, rotated rounds, page cache dropped, the same forced
     sequence) and sets its measured decode tok/s beside the prediction.
It also measures the read-size curve (eta) of this disk on the synthetic checkpoint's shards and plots it with both models' read
sizes. Checkpoints and conditions are those of bench/tiers.py: edge0-tiny evicts its experts before every step with a pool of 1/8
of its experts; the 2.2 GB synthetic runs capped at half its size with a 256 MiB pool, its prefill outside the throttle.
"""
import argparse, os, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from edge0.harness import Arm, run, save, table, tier_name  # noqa: E402
from edge0.files import teacher_path  # noqa: E402
from edge0.measure import eta_curve, plot_eta  # noqa: E402
from edge0.plan import (calibration_table, head_recall, heads_planned, model_bytes, model_trace, plan,  # noqa: E402
                        plot_calibration, served_by_heads, this_machine)
from edge0.store import ExpertStore  # noqa: E402

# (checkpoint, K, mode, tier): grouped by checkpoint and tier, one harness run per group
CONFIGS = [('tiny', 8, 'off', 'nvme'), ('tiny', 8, 'routing', 'nvme'), ('tiny', 4, 'routing', 'sata'),
           ('tiny', 8, 'off', 'usb'), ('tiny', 8, 'routing', 'usb'),
           ('synthetic', 8, 'off', 'usb'), ('synthetic', 8, 'routing', 'usb'),
           ('synthetic', 4, 'off', 'emmc'), ('synthetic', 4, 'routing', 'emmc')]

def checkpoint(name, synthetic):
    "(model dir, arm options, run options, cap MiB, cold_steps) of a checkpoint, as bench/tiers.py runs it"
    if name == 'tiny':
        m = teacher_path('edge0-tiny')
        st = ExpertStore(m); pool = 48 * st.expert_nbytes / 2**20; st.close()
        return m, dict(pool_mb=pool, cold_steps=True), {}, None, True
    m = Path(synthetic)
    if not (m / 'config.json').exists(): raise SystemExit(f"{m} is missing: run bench/prerouter_ab.py once to build it")
    cap = sum(f.stat().st_size for f in m.glob('*.safetensors')) / 2 / 2**20
    return m, dict(pool_mb=256), dict(cap_mb=cap, throttle_prefill=False), cap, False

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--only', choices=('tiny', 'synthetic'), help='one checkpoint only')
    ap.add_argument('--synthetic', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-2g'))
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--tokens', type=int, default=16)
    ap.add_argument('--prompt', type=int, default=16)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'plan_calibration'))
    a = ap.parse_args()
    os.environ['EDGE0_CACHE'] = tempfile.mkdtemp(prefix='edge0-calibration-')  # every input measured in this run
    lines, rows, t0 = [], [], time.time()
    def say(s=''): print(s, flush=True); lines.append(s)
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    configs = [c for c in CONFIGS if not a.only or c[0] == a.only]
    groups = {}
    for c in configs: groups.setdefault((c[0], c[3]), []).append(c)
    eta = None
    if not a.only or a.only == 'synthetic':
        eta = eta_curve(checkpoint('synthetic', a.synthetic)[0], seconds=1.0, max_mb=256)
        say('cold read rate (MB/s) by read size on this disk (synthetic checkpoint shards):')
        for p, v in eta.mb_s.items(): say(f"  {p:>10}: " + '  '.join(f"{s // 1024}K {r:.0f}" for s, r in zip(eta.sizes, v)))
    for (name, tier), cs in groups.items():
        m, arm_kw, run_kw, cap, cold_steps = checkpoint(name, a.synthetic)
        say(f"\n=== {m.name} on tier {tier}" + (f", memory cap {cap:.0f} MiB" if cap else ', experts evicted every step'))
        arms, preds = [], []
        for _, k, mode, _ in cs:
            dev, compute = this_machine(m, k, tier, cap, cold_steps, modes=(mode,), eta=eta)
            trace = model_trace(m, k, a.prompt + a.tokens)
            recall = head_recall(m, k) if mode == 'routing' else None
            planned = heads_planned(m, k) if mode == 'routing' else None
            served = served_by_heads(m, k, a.prompt + a.tokens, a.prompt) if mode == 'routing' else None
            p = plan(m, dev, k, arm_kw['pool_mb'], (mode,), trace, compute, recall, planned, a.prompt, served)
            say(f"  K={k} {mode}: {dev.name}; runtime {dev.runtime_mb:.0f} MiB; expert reads cold "
                + ', '.join(f"{b}: {r['ms_per_expert']:.2f}" for b, r in dev.expert_ms['cold'].items()) + ' ms, warm '
                + ', '.join(f"{b}: {r['ms_per_expert']:.2f}" for b, r in dev.expert_ms['warm'].items())
                + f" ms; compute {compute[mode].step_ms:.1f} ms" + (f"; recall {sum(recall.values()) / len(recall):.2f}"
                                                                   if recall else ''))
            arms.append(Arm(m, mode, k, **arm_kw))
            preds.append((k, mode, dev, p['rows'][mode]))
        rep = run(arms, a.tokens, a.prompt, a.rounds, cache='cold', tier=tier, out=ROOT / 'build' / 'harness', **run_kw)
        say(table(rep))
        for arm, (k, mode, dev, pred) in zip(arms, preds):
            meas = rep['results'][arm.name]
            rows.append(dict(name=f"{m.name} {mode} K={k} {tier_name(tier)}" + (f" cap {cap:.0f}" if cap else ''),
                             short=f"{'tiny' if name == 'tiny' else 'syn'} {mode[:3]} K{k} {tier}", model=name, k=k,
                             mode=mode, tier=tier, cap_mb=cap, device=dev.name, storage_mb_s=dev.storage_mb_s,
                             predicted=pred, measured={x: meas[x] for x in ('decode_tps', 'mb_per_step',
                                                                             'blocked_ms_per_step', 'cold_fraction',
                                                                             'rss_mb') if x in meas} or None))
    report = dict(date=time.strftime('%Y-%m-%d %H:%M'), rounds=a.rounds, tokens=a.tokens, prompt=a.prompt, rows=rows,
                  eta=dict(sizes=eta.sizes, mb_s=eta.mb_s, source=eta.source) if eta else None,
                  seconds=time.time() - t0)
    say('\npredicted (planner) vs measured (harness) decode tok/s\n' + calibration_table(report))
    fig, axs = plt.subplots(1, 2 if eta else 1, figsize=(10 if eta else 5, 4.2), squeeze=False)
    plot_calibration(report, axs[0][0])
    if eta:
        grains = {}
        for n in ('tiny', 'synthetic'):
            mb = model_bytes(checkpoint(n, a.synthetic)[0])
            grains[f"{n} expert range"] = max(mb['ranges'])
        plot_eta(eta, grains, axs[0][1])
    fig.tight_layout(); fig.savefig(a.out + '.png', dpi=110)
    save(report, a.out + '.json')
    Path(a.out + '.txt').write_text('\n'.join(lines) + '\n')
    print(f"\nwrote {a.out}.txt, .json and .png ({time.time() - t0:.0f} s)")

if __name__ == '__main__': main()
