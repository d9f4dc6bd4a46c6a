"""The planner against what it predicts, side by side, in one run: edge0's decode tok/s measured by the harness,
and static offload measured on llama.cpp reading the same weights.

    python bench/plan_calibration.py          # every configuration, 2 rounds; writes bench/results/plan_calibration.*
    python bench/plan_calibration.py --only code --rounds 1

Configurations whose decode step is at least 20 ms (steps of a few ms move 30% between runs here): the 2.2 GB
synthetic Qwen3-MoE at two storage tiers (usb at K=8, emmc at K=4) x two memory caps (half and three quarters of its
size) x `off`/`routing`, its 256 MiB pool, its prefill outside the throttle; and the code teacher (edge0-tiny-code) at
K=8 on the sata tier with its experts evicted before every step and a pool of 1/8 of them, `off` and `routing`.

For each configuration this script
  1. measures this machine inside that tier and cap (edge0.plan_inputs.this_machine: the checkpoint's cold read rate, the
     store's expert reads at batch 1 and K, cold and warm, in a child cgroup; what a cold miss adds to a decode step
     there over a warm one, in `off` and in the mode, timed in place in one process (edge0.measure.cold_misses): what
     the step waited for and what it computed beside; the mode's compute profile with every expert pooled, no cap, no
     throttle; the runtime's memory), the model's routing of the forced sequence and, for `routing`, the sets a
     routing decode serves over it (edge0.plan_inputs.served_by_heads);
  2. runs the arm by the harness's protocol (edge0.harness.run: own process, page cache dropped, the same forced
     sequence), one round at a time, and beside each round the arm's warm twin: the same mode, K and pool with every
     page of the checkpoint cached, no tier and no cap, so none of its misses reads the disk; the arms' order rotates
     round to round;
  3. predicts the warm twin with edge0.plan.plan (the disk's part of a miss set to nothing) and scales the compute
     profile by the warm twin's measured step over that prediction: the compute and the in-place cost of misses at
     the machine's speed in that round, for this VM's speed moves 20-40% between processes and over minutes;
  4. predicts decode tok/s with edge0.plan.plan from the inputs of 1 with that compute, and sets the arm's measured
     decode tok/s beside it. What is checked is the planner's model of the reads: which misses are cold, what the
     disk adds to each and what it costs beside the waits, what the background reads leave exposed.
Static offload (`static`, llama.cpp's mmap): where llama.cpp is built (../shared/tools/llama_anchor.sh, as
bench/cpu_step.py builds it; --llama), each synthetic tier x cap also runs llama-bench's decode on a Q4_0 GGUF of the
same weights (written by edge0.gguf.write_q4_0 where it is missing) in the same cgroup (cap and throttle), page cache
dropped, at the checkpoint's own K, and compares it with the planner's `static` row. A run decodes up to --tokens tokens
after llama-bench's warm-up token: as many as the prediction puts in about 90 s, at least 2 (on the usb tier a token
reads about 2 GB). Its compute is llama.cpp's own, measured here warm and unthrottled; its runtime memory is
llama-bench's peak anonymous memory; its bytes a step are the cgroup's reads over the test (warm-up token included).
It also measures the read-size curve (eta) of this disk on the synthetic checkpoint's shards and plots it with both
models' read sizes.
"""
import argparse, os, sys, tempfile, time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from edge0.conditions import conditions, tier_name
from edge0.harness import Arm, routing_report, run, save, summarize, table  # noqa: E402
from edge0.files import teacher_path  # noqa: E402
from edge0.gguf import write_q4_0  # noqa: E402
from edge0.measure import eta_curve, plot_eta  # noqa: E402
from edge0.plan import Compute, model_bytes, plan  # noqa: E402
from edge0.plan_calibration import calibration_table, plot_calibration  # noqa: E402
from edge0.plan_inputs import head_recall, heads_planned, model_trace, served_by_heads, this_machine  # noqa: E402
from edge0.store import ExpertStore, drop_cache, model_spec  # noqa: E402

CAPS = (0.5, 0.75)  # memory caps of the synthetic, as fractions of its size
# (checkpoint, K, mode, tier, cap): grouped by checkpoint, tier and cap, one harness run per group
CONFIGS = ([('code', 8, 'off', 'sata', None), ('code', 8, 'routing', 'sata', None)]
           + [('synthetic', k, mode, tier, cap) for cap in CAPS for k, tier in ((8, 'usb'), (4, 'emmc'))
              for mode in ('off', 'routing')])

def checkpoint(name, synthetic, cap=None):
    "(model dir, arm options, run options, cap MiB, cold_steps) of a checkpoint, as bench/tiers.py runs it"
    if name == 'code':
        m = teacher_path('edge0-tiny-code')
        st = ExpertStore(m); pool = 48 * st.expert_nbytes / 2**20; st.close()
        return m, dict(pool_mib=pool, cold_steps=True), {}, None, True
    m = Path(synthetic)
    if not (m / 'config.json').exists(): raise SystemExit(f"{m} is missing: run bench/prerouter_ab.py once to build it")
    cap_mb = sum(f.stat().st_size for f in m.glob('*.safetensors')) * cap / 2**20
    return m, dict(pool_mib=256), dict(cap_mb=cap_mb, throttle_prefill=False), cap_mb, False

def warm_name(arm):
    "The name of `arm`'s warm twin (`rotated`)"
    return arm.name + '/warm'

def scale_compute(c, s:float):
    "Compute `c` with every part, and a warm miss's in-place cost, times `s`"
    return Compute([x * s for x in c.attention_ms], [x * s for x in c.moe_ms], c.rest_ms * s,
                   c.source + f", scaled by {s:.3f}", None if c.miss_ms is None else c.miss_ms * s)

def rotated(arms, a, tier, run_kw, say):
    """`(cold report, warm report)` of `arms`: each round one harness run of the arms as calibrated (cold, in the cap)
    and one of their warm twins (every page cached, no tier, no cap, experts kept between steps) beside it, the arms'
    order rotated round to round; each report the medians over its rounds"""
    notes = {arms[0].model: routing_report(arms[0].model)}
    twins = [replace(x, cold_steps=False, name=warm_name(x)) for x in arms]
    cold, warm = [], []
    kw = dict(tokens=a.tokens, prompt=a.prompt, rounds=1, out=ROOT / 'build' / 'harness', routing=notes, progress=False)
    for r in range(a.rounds):
        turn = lambda xs: xs[r % len(xs):] + xs[:r % len(xs)]
        warm.append(run(turn(twins), cache='warm', **kw))  # nothing read from the disk: no tier, no cap
        cold.append(run(turn(arms), cache='cold', tier=tier, **kw, **run_kw))
        say(f"  round {r + 1}: " + ', '.join(f"{n} {x['decode_tps']:.2f}" for rep in (cold[-1], warm[-1])
                                         for n, x in rep['results'].items()) + ' tok/s')
    merge = lambda reps: summarize(dict(reps[0], rounds=len(reps),
                                        runs={n: [x for rep in reps for x in rep['runs'][n]] for n in reps[0]['runs']}))
    return merge(cold), merge(warm)

def llama_static(m, k, tier, cap, dev, trace, rounds, tokens, work, say):
    """The planner's `static` row for the synthetic `m` in `tier` and `cap`, and llama.cpp's decode measured there: a
    calibration row, or None where llama.cpp is not built"""
    from cpu_step import llama, runs_here
    bench, gguf = work / 'bin' / 'llama-bench', work / f'{m.name}-Q4_0.gguf'
    if not bench.exists():
        say(f"  static: llama.cpp is not built ({bench}): bash ../shared/tools/llama_anchor.sh {work}")
        return None
    if not gguf.exists():
        say(f"  static: writing {gguf.name} from the int4 checkpoint (edge0.gguf.write_q4_0)")
        write_q4_0(m, gguf)
    if not runs_here(bench, gguf):
        say(f"  static: {bench} was built for another CPU (illegal instruction here); build it for this one: "
            f"rm -r {work / 'bin'} && bash ../shared/tools/llama_anchor.sh {work}")
        return None
    warm = llama(bench, gguf, 'tg', tokens)  # in RAM, unthrottled: llama.cpp's own compute a token
    if warm.get('failed'): raise SystemExit(f"llama-bench failed: {warm['stderr']}")
    n_layers = model_spec(m).num_layers  # llama.cpp's compute is one figure a token: no layer of it is apart
    compute = Compute([0.0] * n_layers, [0.0] * n_layers, 1e3 / warm['tps'], 'llama.cpp, in RAM')
    d = replace(dev, runtime_mb=warm['anon_mb'], name=dev.name + ' (llama.cpp)')
    # llama-bench decodes one warm-up token, then the test's: the warm-up is the prompt the page cache starts from
    pred = plan(m, d, k, 0, ('static',), trace, {'static': compute}, prompt=1)['rows']['static']
    n = max(2, min(tokens, int(90 * pred['tps'])))  # about 90 s a run where a token takes many seconds
    runs = []
    for _ in range(rounds):
        drop_cache(gguf)
        cg, _, _ = conditions(gguf, int(cap * 2**20), tier)
        try:
            before = cg.io_bytes()['read']
            r = llama(bench, gguf, 'tg', n, cg)
            r['mb'] = (cg.io_bytes()['read'] - before) / (n + 1) / 2**20
        finally: cg.close()
        if r.get('failed'): raise SystemExit(f"llama-bench under the cap failed: {r['stderr']}")
        runs.append(r)
    tps = sorted(r['tps'] for r in runs)[len(runs) // 2]
    mb = sorted(r['mb'] for r in runs)[len(runs) // 2]
    say(f"  K={k} static: llama.cpp {gguf.name}: {warm['tps']:.2f} tok/s in RAM ({1e3 / warm['tps']:.1f} ms), runtime "
        f"{warm['anon_mb']:.0f} MiB; capped and throttled " + ', '.join(f"{r['tps']:.3f}" for r in runs)
        + f" tok/s over {n} tokens, {mb:.1f} MiB read a token (warm-up token included); read-ahead {d.readahead_kb:.0f} KB")
    return dict(tps=tps, mb_per_step=mb, pred=pred)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--only', choices=('code', 'synthetic'), help='one checkpoint only')
    ap.add_argument('--synthetic', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-2g'))
    ap.add_argument('--llama', default=str(ROOT / 'build' / 'llama'),
                    help='where llama.cpp is built and the GGUF written')
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--tokens', type=int, default=16)
    ap.add_argument('--prompt', type=int, default=16)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'plan_calibration'))
    a = ap.parse_args()
    os.environ['EDGE0_CACHE'] = tempfile.mkdtemp(prefix='edge0-calibration-')  # every input measured in this run
    lines, rows, static, t0 = [], [], [], time.time()
    def say(s=''): print(s, flush=True); lines.append(s)
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    configs = [c for c in CONFIGS if not a.only or c[0] == a.only]
    groups = {}
    for c in configs: groups.setdefault((c[0], c[3], c[4]), []).append(c)
    eta = None
    if not a.only or a.only == 'synthetic':
        eta = eta_curve(checkpoint('synthetic', a.synthetic, 1)[0], seconds=1.0, max_mb=256)
        say('cold read rate (MB/s) by read size on this disk (synthetic checkpoint shards):')
        for p, v in eta.mb_s.items(): say(f"  {p:>10}: " + '  '.join(f"{s // 1024}K {r:.0f}" for s, r in zip(eta.sizes, v)))
    for (name, tier, frac), cs in groups.items():
        m, arm_kw, run_kw, cap, cold_steps = checkpoint(name, a.synthetic, frac)
        say(f"\n=== {m.name} on tier {tier}" + (f", memory cap {cap:.0f} MiB" if cap else ', experts evicted every step'))
        arms, inputs = [], []
        for _, k, mode, _, _ in cs:
            dev, compute = this_machine(m, k, tier, cap, cold_steps, modes=(mode,), eta=eta)
            trace = model_trace(m, k, a.prompt + a.tokens)
            recall = head_recall(m, k) if mode == 'routing' else None
            planned = heads_planned(m, k) if mode == 'routing' else None
            served = served_by_heads(m, k, a.prompt + a.tokens, a.prompt) if mode == 'routing' else None
            say(f"  K={k} {mode}: {dev.name}; runtime {dev.runtime_mb:.0f} MiB; expert reads cold "
                + ', '.join(f"{b}: {r['ms_per_expert']:.2f}" for b, r in dev.expert_ms['cold'].items()) + ' ms, warm '
                + ', '.join(f"{b}: {r['ms_per_expert']:.2f}" for b, r in dev.expert_ms['warm'].items()) + ' ms, direct '
                + ', '.join(f"{b}: {r['ms_per_expert']:.2f}" for b, r in dev.expert_ms['direct'].items())
                + f" ms; a cold miss in a decode {dev.miss_cold_ms:.2f} ms; compute {compute[mode].step_ms:.1f} ms"
                + (f"; recall {sum(recall.values()) / len(recall):.2f}" if recall else ''))
            arms.append(Arm(m, mode, k, **arm_kw))
            inputs.append((k, mode, dev, compute, trace, recall, planned, served))
        rep, warm = rotated(arms, a, tier, run_kw, say)
        say(table(rep))
        say('the same arms with every page cached, no cap, run beside them (the compute reference):')
        say(table(warm))
        where = f" {tier_name(tier)}" + (f" cap {cap:.0f}" if cap else '')
        preds = []
        for arm, (k, mode, dev, compute, trace, recall, planned, served) in zip(arms, inputs):
            args = (k, arm_kw['pool_mib'], (mode,), trace)
            rest = (recall, planned, a.prompt, served)
            at_warm = plan(m, replace(dev, miss_cold_ms=0.0), *args, compute, *rest)['rows'][mode]
            w = warm['results'][warm_name(arm)]
            s = 1e3 / w['decode_tps'] / at_warm['step_ms']
            scaled = {mode: scale_compute(compute[mode], s)}
            pred = plan(m, dev, *args, scaled, *rest)['rows'][mode]
            say(f"  {arm.name}: warm arm {1e3 / w['decode_tps']:.1f} ms a step, the planner's warm step "
                f"{at_warm['step_ms']:.1f} ms: compute scaled by {s:.3f}")
            preds.append((k, mode, dev, pred))
            meas = rep['results'][arm.name]
            rows.append(dict(name=f"{m.name} {mode} K={k}{where}", model=name, k=k, mode=mode, tier=tier, cap_mb=cap,
                             device=dev.name, storage_mb_s=dev.storage_mb_s, predicted=pred, compute_scale=s,
                             warm=dict(decode_tps=w['decode_tps'], planned_step_ms=at_warm['step_ms']),
                             measured={x: meas[x] for x in ('decode_tps', 'mb_per_step', 'blocked_ms_per_step',
                                                            'cold_fraction', 'rss_mb') if x in meas} or None))
        if name == 'synthetic':  # llama.cpp at the checkpoint's own K: its routing is the GGUF's
            k0 = model_bytes(m)['k']
            dev = preds[0][2] if preds[0][0] == k0 else this_machine(m, k0, tier, cap, False, modes=('off',), eta=eta)[0]
            r = llama_static(m, k0, tier, cap, dev, model_trace(m, k0, 1 + a.tokens), a.rounds, a.tokens,
                             Path(a.llama), say)
            if r: static.append(dict(name=f"{m.name} static K={k0}{where}", model=name, k=k0, mode='static', tier=tier,
                                     cap_mb=cap, device=dev.name, storage_mb_s=dev.storage_mb_s, predicted=r['pred'],
                                     measured=dict(decode_tps=r['tps'], mb_per_step=r['mb_per_step'],
                                                   blocked_ms_per_step=1e3 / r['tps'] - r['pred']['compute_ms'])))
    report = dict(date=time.strftime('%Y-%m-%d %H:%M'), rounds=a.rounds, tokens=a.tokens, prompt=a.prompt, rows=rows,
                  static=static, eta=dict(sizes=eta.sizes, mb_s=eta.mb_s, source=eta.source) if eta else None,
                  seconds=time.time() - t0)
    say('\npredicted (planner) vs measured (harness) decode tok/s\n' + calibration_table(report))
    if static:
        say('\nstatic offload: predicted (planner) vs measured (llama.cpp, mmap, same cgroup) decode tok/s\n'
            + calibration_table(dict(rows=static)))
    fig, axs = plt.subplots(1, 2 if eta else 1, figsize=(10 if eta else 5, 4.2), squeeze=False)
    plot_calibration(dict(report, rows=rows + static), axs[0][0])
    if eta:
        grains = {}
        for n in ('code', 'synthetic'):
            mb = model_bytes(checkpoint(n, a.synthetic, 1)[0])
            grains[f"{n} expert range"] = max(mb['ranges'])
        plot_eta(eta, grains, axs[0][1])
    fig.tight_layout(); fig.savefig(a.out + '.png', dpi=110)
    save(report, a.out + '.json')
    Path(a.out + '.txt').write_text('\n'.join(lines) + '\n')
    print(f"\nwrote {a.out}.txt, .json and .png ({time.time() - t0:.0f} s)")

if __name__ == '__main__': main()
