"""Time to the first token, cold and warm, by how prefill reads experts: only those the prompt routes to (`exact`), whole
layers (`whole_layer`), edge0's default (`auto`: per layer, the cheaper of the two by the planner's byte arithmetic), and
the torch step (its torch-cpu copy, routed experts only).

    python bench/cold_first_token.py        # the 1.85 GB synthetic and its calibrated twin, 20- and 1000-token prompts
    python bench/cold_first_token.py --model build/bench/qwen3moe-16l-calibrated --calibrated '' --prompts 20

Each run is a fresh process, as a user's `edge0 generate` is: it loads the model and prefills the prompt (random token
ids, the same for every arm), and its time to first token is the prefill up to the first token, after the load. Cold:
the checkpoint dropped from the page cache before the process starts; warm: read once before (by default only for the
short prompts: a long prompt's prefill is compute). Under a memory cap the process runs in a child memory cgroup (no
swap) with its page cache; uncapped it has the machine. `--pool-mib auto` as a user runs it. Two checkpoints of the
same shape (bench/memory_budget.py's SHAPE_16L, built and converted where missing): the uniform synthetic, whose routing
touches more experts than a trained model's (which favours whole layers), and the calibrated one, routed as trained
MoEs route; each one's routing statistics are printed first. `whole` counts the layers whose prefill read every expert (for
`auto` on a short prompt, the layers it chose to read whole). Long prompts run `--long-paths` only: the MLX graph's CPU kernels take minutes on 1,000 tokens, and
`exact` reads every expert there too. Medians over rounds alternating the arms' order; every figure measured in this
run.
"""
import argparse, json, statistics, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_budget import SHAPE_16L, checkpoint  # noqa: E402  built and converted where missing

ROOT = Path(__file__).resolve().parent.parent
PATHS = ('exact', 'whole_layer', 'auto', 'torch_step')


def first_token(model:str, path:str, prompt:int) -> dict:
    """Child: load `model` with prefill path `path` (`torch_step`: its `--layout torch-cpu` copy, served by the torch
    step), prefill `prompt` random ids to the first token; times and bytes read"""
    import numpy as np
    disk = lambda: int(dict(l.split(': ') for l in Path('/proc/self/io').read_text().splitlines())['read_bytes'])
    t0, d0 = time.perf_counter(), disk()
    from edge0 import decode, torchstep
    from edge0.memory import peak_rss
    from edge0.streaming import StreamOptions, stats as stream_stats
    step = path == 'torch_step'
    if step: model = model + '-torch-cpu'
    h = decode.load(model, 'off', options=StreamOptions(**(dict(kernels='torch') if step else dict(prefill_path=path))))
    st = torchstep.TorchStep(h) if step else None
    t1, d1 = time.perf_counter(), disk()
    config = json.loads((Path(model) / 'config.json').read_text())
    vocab = (config.get('text_config') or config)['vocab_size']
    ids = np.random.default_rng(0).integers(10, vocab, prompt).tolist()
    gen = decode.generate_ids(st, ids, 1) if step else decode.generate_ids(h.model, ids, 1, decoder=h.decoder)
    tok = next(gen)
    t2, d2 = time.perf_counter(), disk()
    s = stream_stats(h.engine)
    E = h.engine.num_experts
    return dict(load_s=t1 - t0, ttft_s=t2 - t1, token=int(tok[0] if isinstance(tok, tuple) else tok),
                mb_read=s['total']['bytes_read'] / 1e6, disk_mb_load=(d1 - d0) / 1e6, disk_mb_prefill=(d2 - d1) / 1e6,
                mapped=h.engine.pool.mapped is not None, loads=s['total']['loads'], peak_rss_mb=peak_rss() / 2**20,
                whole_layers=sum(r['loads'] >= E for r in s['layers'].values()), layers=len(s['layers']),
                reader=s['reads']['reader'])


def run(model:Path, path:str, prompt:int, cold:bool, cap_mb:float|None) -> dict:
    from edge0.conditions import Cgroup, evict, memory_cap, run_child, warm
    m = Path(str(model) + '-torch-cpu') if path == 'torch_step' else model
    if cold: evict(m)
    else: warm(m)
    cg = Cgroup(memory_cap(cap_mb * 2**20)) if cap_mb else None
    try:
        r = run_child(first_token, str(model), path, prompt, cgroup=cg, timeout=1800)
    finally:
        if cg: cg.close()
    return r.get('result') or dict(failed=True, why=(r.get('stderr') or '')[-300:])


def models_of(a) -> list:
    "The mlx-layout checkpoints to run (each with its torch-cpu copy), built and converted where missing"
    shape = dict(SHAPE_16L, **({'num_layers': a.layers} if a.layers else {}))
    model = Path(a.model)
    checkpoint(model, shape)
    out = [model]
    if a.calibrated:
        checkpoint(Path(a.calibrated), dict(shape, routing='calibrated'))
        out.append(Path(a.calibrated))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    bench = ROOT / 'build' / 'bench'
    ap.add_argument('--model', default=str(bench / 'qwen3moe-16l'))
    ap.add_argument('--calibrated', default=str(bench / 'qwen3moe-16l-calibrated'),
                    help="the calibrated twin ('': none)")
    ap.add_argument('--layers', type=int, help='build the checkpoints with this many layers (a quick check)')
    ap.add_argument('--prompts', default='20,1000', help='prompt lengths, comma-separated')
    ap.add_argument('--warm', default='20', help='prompt lengths also run warm, comma-separated')
    ap.add_argument('--caps', default='1200,0', help='memory caps in MiB, comma-separated (0: uncapped)')
    ap.add_argument('--paths', default=','.join(PATHS))
    ap.add_argument('--long-paths', default='whole_layer,auto,torch_step',
                    help='the paths of prompts over --long tokens')
    ap.add_argument('--long', type=int, default=100)
    ap.add_argument('--rounds', type=int, default=1)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'cold_first_token'))
    a = ap.parse_args()
    from edge0.harness import routing_report
    t0 = time.time()
    models = models_of(a)
    warm_prompts = {int(p) for p in a.warm.split(',') if p}
    lines = [f"time to first token, {time.strftime('%Y-%m-%d %H:%M')}: fresh processes, medians of {a.rounds} "
             "round(s) alternating the arms' order"]
    res = {}
    for model in models:
        size = sum(f.stat().st_size for f in model.glob('*.safetensors')) / 1e9
        lines += [f"{model.name} ({size:.2f} GB)", routing_report(model)]
        print('\n'.join(lines[-2:]), flush=True)
        for cap in [float(c) for c in a.caps.split(',')]:
            for prompt in [int(p) for p in a.prompts.split(',')]:
                paths = (a.long_paths if prompt > a.long else a.paths).split(',')
                for cold in (True, False) if prompt in warm_prompts else (True,):
                    rows = {p: [] for p in paths}
                    for r in range(a.rounds):
                        for p in (paths if r % 2 == 0 else paths[::-1]):
                            rows[p].append(run(model, p, prompt, cold, cap or None))
                            print(f"  {model.name} cap {cap or 'none'} prompt {prompt} {'cold' if cold else 'warm'} "
                                  f"{p}: {rows[p][-1]}", flush=True)
                    res[f"{model.name}/{cap:g}/{prompt}/{'cold' if cold else 'warm'}"] = rows
    lines += table(res)
    lines.append(f"wall {time.time() - t0:.0f} s")
    Path(a.out + '.json').write_text(json.dumps(res, indent=1))
    Path(a.out + '.txt').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


def table(res:dict) -> list:
    "One row per model, cap, prompt and cache: each path's median seconds (disk MB, layers read whole), whole over each"
    ok = lambda rs: rs and all(not r.get('failed') for r in rs)
    med = lambda rs, key: statistics.median(r[key] for r in rs) if ok(rs) else None
    lines = ['', f"  {'checkpoint':24} {'cap MiB':>7} {'prompt':>6} {'cache':>5} "
             + ''.join(f"{p + ' s (disk MB, whole)':>34}" for p in PATHS)
             + ''.join(f"{'whole / ' + p:>22}" for p in PATHS if p != 'whole_layer')]
    for key, rows in res.items():
        model, cap, prompt, cold = key.split('/')
        t = {p: med(rows.get(p), 'ttft_s') for p in PATHS}
        cells = []
        for p in PATHS:
            rs = rows.get(p)
            if t[p] is not None:
                whole = f"{med(rs, 'whole_layers'):.0f}/{rs[0]['layers']}"
                cells.append(f"{t[p]:>12.2f} ({med(rs, 'disk_mb_prefill'):>7.0f} MB, {whole:>5})")
            else: cells.append(f"{'failed: ' + rs[0].get('why', '')[-20:] if rs else '-':>34}")
        ratios = [f"{t['whole_layer'] / t[p]:>21.2f}x" if t['whole_layer'] and t[p] else f"{'':>22}"
                  for p in PATHS if p != 'whole_layer']
        lines.append(f"  {model:24} {cap if cap != '0' else 'none':>7} {prompt:>6} {cold:>5} " + ''.join(cells)
                     + ''.join(ratios))
    return lines


if __name__ == '__main__':
    main()
