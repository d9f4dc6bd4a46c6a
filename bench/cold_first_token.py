"""Time to the first token, cold and warm, by how prefill reads experts: only those the prompt routes to (`exact`), whole
layers (`whole_layer`), or edge0's default (`auto`: the cheaper of the two by the planner's byte arithmetic).

    python bench/cold_first_token.py                       # the 1.85 GB synthetic, 20- and 1000-token prompts
    python bench/cold_first_token.py --model build/bench/qwen35moe-16l-calibrated --prompts 20 --rounds 1

Each run is a fresh process, as a user's `edge0 generate` is: it loads the model and prefills the prompt (random token
ids, the same for every arm), and its time to first token is the prefill up to the first token, after the load. Cold:
the checkpoint dropped from the page cache before the process starts; warm: read once before. Under a memory cap the
process runs in a child memory cgroup (no swap) with its page cache; uncapped it has the machine. `--pool-mib auto` as a
user runs it. The checkpoint's routing statistics are printed first (a synthetic's uniform routing touches more experts
than a trained model's, which favours whole layers). Medians over rounds alternating the arms' order; every figure
measured in this run.
"""
import argparse, json, statistics, sys, time
from pathlib import Path

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
    return dict(load_s=t1 - t0, ttft_s=t2 - t1, token=int(tok[0] if isinstance(tok, tuple) else tok),
                mb_read=s['total']['bytes_read'] / 1e6, disk_mb_load=(d1 - d0) / 1e6, disk_mb_prefill=(d2 - d1) / 1e6,
                mapped=h.engine.pool.mapped is not None, loads=s['total']['loads'], peak_rss_mb=peak_rss() / 2**20,
                )


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l'))
    ap.add_argument('--prompts', default='20,1000', help='prompt lengths, comma-separated')
    ap.add_argument('--caps', default='1200,0', help='memory caps in MiB, comma-separated (0: uncapped)')
    ap.add_argument('--paths', default=','.join(PATHS))
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'cold_first_token'))
    a = ap.parse_args()
    from edge0.harness import routing_report
    model = Path(a.model)
    size = sum(f.stat().st_size for f in model.glob('*.safetensors')) / 1e9
    t0 = time.time()
    lines = [f"time to first token, {time.strftime('%Y-%m-%d %H:%M')}: {model.name} ({size:.2f} GB), fresh processes, "
             f"medians of {a.rounds} rounds alternating the arms' order", routing_report(model)]
    print('\n'.join(lines), flush=True)
    paths, res = a.paths.split(','), {}
    for cap in [float(c) for c in a.caps.split(',')]:
        for prompt in [int(p) for p in a.prompts.split(',')]:
            for cold in (True, False):
                rows = {p: [] for p in paths}
                for r in range(a.rounds):
                    for p in (paths if r % 2 == 0 else paths[::-1]):
                        rows[p].append(run(model, p, prompt, cold, cap or None))
                        print(f"  cap {cap or 'none'} prompt {prompt} {'cold' if cold else 'warm'} {p}: {rows[p][-1]}",
                              flush=True)
                res[f"{cap:g}/{prompt}/{'cold' if cold else 'warm'}"] = rows
    lines += table(res, paths)
    lines.append(f"wall {time.time() - t0:.0f} s")
    Path(a.out + '.json').write_text(json.dumps(res, indent=1))
    Path(a.out + '.txt').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines[2:]))


def table(res:dict, paths:list) -> list:
    med = lambda rs, key: statistics.median(r[key] for r in rs) if all(not r.get('failed') for r in rs) else None
    lines = ['', f"  {'cap MiB':>8} {'prompt':>6} {'cache':>5} " + ''.join(f"{p + ' s (disk MB)':>26}" for p in paths)
             + f"{'whole / exact':>15}"]
    for key, rows in res.items():
        cap, prompt, cold = key.split('/')
        cells, t = [], {}
        for p in paths:
            t[p] = med(rows[p], 'ttft_s')
            cells.append(f"{t[p]:>12.2f} ({med(rows[p], 'disk_mb_prefill'):>8.0f} MB)" if t[p] is not None
                         else f"{'failed: ' + rows[p][0].get('why', '')[-16:]:>26}")
        ratio = (f"{t['whole_layer'] / t['exact']:>14.2f}x" if t.get('whole_layer') and t.get('exact') else '')
        lines.append(f"  {cap if cap != '0' else 'none':>8} {prompt:>6} {cold:>5} " + ''.join(cells) + ratio)
    return lines


if __name__ == '__main__':
    main()
