"""Where a decode step of the torch step goes: the whole step, its int4 products alone, and everything else alone, from one
run on the checkpoints of the decode table (bench/cpu_step.py: the 1.85 GB Qwen3-MoE synthetic and the tier families'
calibrated qwen3_5_moe and deepseek_v3 ones, torch-cpu layout, built there).

    python bench/step_costs.py                 # every checkpoint found under build/bench, 3 rounds
    python bench/step_costs.py --models deepseekv3-16l-calibrated --rounds 5

Each checkpoint's routing statistics are printed first. Then, in one process per checkpoint (every expert mapped, mode
`off`, greedy, a 23-token prompt, --tokens decode steps after it), three arms alternate within each round:

- step: the decode steps as served, ms a token;
- int4 alone: every `_weight_int4pack_mm_for_cpu` call of the step arm's last round, recorded, replayed back to back
  (the same weights in the same order: what the products cost with nothing between them), ms a token;
- the rest alone: the decode steps with each int4 product replaced by a zero tensor of its shape (the routing changes,
  the number and kind of the other operations does not), ms a token.

The step costs more than the two alone (the small operations run after the weights have passed through the caches); the
report gives that excess and the step's Python-level torch operations a token. Writes bench/results/step_costs.txt and
.json. Medians of --rounds rounds; the host's noise moves every figure, so compare within one run.
"""
import argparse, json, os, statistics, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ('qwen3moe-16l', 'qwen35moe-16l-calibrated', 'deepseekv3-16l-calibrated')


def measure(model:Path, tokens:int, rounds:int) -> dict:
    "The three arms on the torch-cpu checkpoint `model`, alternating within each round (this process)"
    import numpy as np, torch
    from edge0 import decode, torchstep
    from edge0.streaming import StreamOptions
    h = decode.load(model, 'off', options=StreamOptions(kernels='torch', pool_bytes=None), hold=True)
    for layer in h.spec.moe_layers: h.engine.keep_resident(layer)
    st = torchstep.TorchStep(h)
    config = json.loads((model / 'config.json').read_text())
    vocab = (config.get('text_config') or config)['vocab_size']
    prompt = np.random.default_rng(0).integers(10, vocab, 23).tolist()
    real, calls, zeros = torchstep._INT4, [], {}
    def record(*a):
        calls.append(a)
        return real(*a)
    def zero(x, packed, group, sz):
        key = (x.shape[0], sz.shape[1])
        if key not in zeros: zeros[key] = torch.zeros(*key, dtype=torch.bfloat16)
        return zeros[key]
    def decode_ms(kernel, watch=None) -> float:
        "ms a token of `tokens` decode steps after the prompt, the int4 products by `kernel`, under `watch`"
        torchstep._INT4 = kernel
        try:
            gen = decode.generate_ids(st, prompt, tokens + 1)
            next(gen)  # the prompt: not timed
            calls.clear()
            if watch: watch.start()
            t0 = time.perf_counter()
            for _ in gen: pass
            dt = time.perf_counter() - t0
            if watch: watch.stop()
            return 1e3 * dt / tokens
        finally: torchstep._INT4 = real
    def replay_ms() -> float:
        with torch.inference_mode():
            t0 = time.perf_counter()
            for a in calls: real(*a)
            return 1e3 * (time.perf_counter() - t0) / tokens
    decode_ms(real)  # warm: the page cache, the allocator
    rows = dict(step=[], int4=[], rest=[])
    for _ in range(rounds):
        rows['step'].append(decode_ms(record))  # the recording costs a list append a product
        n_calls = len(calls)
        rows['int4'].append(replay_ms())
        rows['rest'].append(decode_ms(zero))
    from torch.profiler import profile, ProfilerActivity
    p = profile(activities=[ProfilerActivity.CPU])  # the decode steps' operations, counted apart from the timing
    decode_ms(real, p)
    ops = sum(1 for e in p.events() if e.cpu_parent is None) / tokens
    med = {k: statistics.median(v) for k, v in rows.items()}
    return dict(rounds=rows, median=med, int4_calls=n_calls / tokens, ops=ops,
                excess=med['step'] - med['int4'] - med['rest'])


def report(d:dict) -> str:
    out = [f"step costs, {d['date']}, {d['machine']}, {d['tokens']} decode tokens, medians of {d['rounds']} rounds "
           "(ms a token)", '']
    for name, r in d['models'].items():
        m = r['median']
        out += [r['routing'],
                f"  {name}: step {m['step']:.2f} | int4 products alone {m['int4']:.2f} ({r['int4_calls']:.0f} a token) | "
                f"the rest alone {m['rest']:.2f} | the step beyond the two {r['excess']:+.2f} | "
                f"torch operations a token {r['ops']:.0f}", '']
    return '\n'.join(out + [d.get('note', ''), f"wall {d['wall_s']:.0f} s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--bench-dir', default=str(ROOT / 'build' / 'bench'), help='where bench/cpu_step.py built them')
    ap.add_argument('--models', default=','.join(MODELS), help='mlx-layout names; their -torch-cpu copies are run')
    ap.add_argument('--tokens', type=int, default=64)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'step_costs'))
    ap.add_argument('--note', default='')
    ap.add_argument('--child', help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:  # one checkpoint, in a process of its own
        return print(json.dumps(measure(Path(a.child), a.tokens, a.rounds)))
    import subprocess
    from edge0.harness import routing_report
    t0, d = time.time(), dict(date=time.strftime('%Y-%m-%d %H:%M'), machine=f"{os.uname().machine}, "
                              f"{os.cpu_count()} cores", tokens=a.tokens, rounds=a.rounds, note=a.note, models={})
    for name in a.models.split(','):
        src = Path(a.bench_dir) / name
        model = src.with_name(name + '-torch-cpu')
        if not (model / 'config.json').exists():
            print(f"{model} is missing: build it with python bench/cpu_step.py (skipped)", flush=True)
            continue
        routing = routing_report(src)
        print(routing, flush=True)
        r = subprocess.run([sys.executable, __file__, '--child', str(model), '--tokens', str(a.tokens),
                            '--rounds', str(a.rounds)], capture_output=True, text=True)
        if r.returncode: sys.exit(f"{name}: the measuring process failed: {r.stderr.strip()[-400:]}")
        d['models'][name] = m = dict(json.loads(r.stdout.strip().splitlines()[-1]), routing=routing)
        print(f"  {name}: {json.dumps(m['median'])}", flush=True)
    if not d['models']: sys.exit(f"none of {a.models} was found under {a.bench_dir}: nothing measured, {a.out}.* kept")
    d['wall_s'] = time.time() - t0
    Path(a.out + '.json').write_text(json.dumps(d, indent=1))
    Path(a.out + '.txt').write_text(report(d) + '\n')
    print('\n' + report(d))


if __name__ == '__main__': main()
