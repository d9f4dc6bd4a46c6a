"""Which bundle the expert pool should drop first, and what a usage profile gives a cold start: the routing of the 1.85 GB
synthetic Qwen3-MoE (uniform routing) and of its calibrated twin (build_synthetic routing='calibrated'), replayed token
by token through one pool shared by the 16 MoE layers, as `ExpertPool` serves a decode.

    python bench/pool_policy.py                       # writes bench/results/pool_policy.{txt,json}
    python bench/pool_policy.py --tokens 512

Each checkpoint's routing statistics are printed first. The trace: edge0's own routing of --tokens held-out tokens
(windows of 256). The first half is history: it makes the usage profile (requests per layer and expert). The second half
is replayed through pools holding 10%, 25% and 50% of all the experts: hit rates of LRU, and of LFU with each use's
weight halving every 8, 16 or 64 tokens; then the first 32 tokens of the second half from an empty pool (a cold start)
against the same pool filled from the profile at start (`StreamOptions(usage_profile=True)`). The replays drive
edge0's own `ExpertPool` (a store that reads nothing stands in) and count hits, not time: the figures repeat exactly on
any machine.
"""
import argparse, json, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_budget import checkpoint, SHAPE_16L, SHAPE_16L_CALIBRATED  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARES = (0.1, 0.25, 0.5)
HALF_LIVES = (8, 16, 64)


def pool_hits(trace:dict, bundles:int, policy:str='lru', half_life:float=16, warm=()) -> float:
    """Hit rate of edge0's own `ExpertPool` of `bundles` experts under `policy`, shared by every layer of `trace`
    ({layer: (tokens, K) ids}), requests made token by token and layer by layer as a decode makes them; `warm`: keys
    put in before the first token, the most requested last (as `StreamEngine.fill_from_usage` does); `half_life` in
    tokens"""
    from edge0.plan import NoReads
    from edge0.streaming import ExpertPool, LayerStats
    layers = sorted(trace)
    k = trace[layers[0]].shape[1]
    pool = ExpertPool(NoReads(k), budget_bundles=bundles, k=k, policy=policy, half_life=half_life * len(layers))
    for key in list(warm)[-bundles:]: pool.put(*key, {})
    stats = LayerStats()
    for t in range(len(trace[layers[0]])):
        for layer in layers: pool.get(layer, list(dict.fromkeys(trace[layer][t].tolist())), stats)
    return stats.hits / (stats.hits + stats.loads)


def trace_of(model:Path, tokens:int) -> dict:
    from edge0.files import heldout_ids, model_corpus
    from edge0.routing_stats import routing_trace
    from edge0.streaming import load
    with load(model, prefill_path='exact', pool_bytes=64 * 2**20) as h:
        ids = heldout_ids(h.tokenizer, corpus=model_corpus(model))[:tokens]
        return routing_trace(h.model, h.spec, ids, None, seq=256)


def measure(trace:dict, num_experts:int) -> dict:
    half = len(next(iter(trace.values()))) // 2
    past, now = ({l: ids[:half] for l, ids in trace.items()}, {l: ids[half:] for l, ids in trace.items()})
    uses = {}
    for l, ids in past.items():
        for e in ids.ravel().tolist(): uses[l, e] = uses.get((l, e), 0) + 1
    profile = sorted(uses, key=lambda key: (uses[key], key))  # the most requested last
    total, rows = len(trace) * num_experts, {}
    for share in SHARES:
        n = int(total * share)
        row = dict(lru=pool_hits(now, n, 'lru'))
        for h in HALF_LIVES: row[f'lfu {h}'] = pool_hits(now, n, 'lfu', h)
        cold = {l: ids[:32] for l, ids in now.items()}
        row['cold start'] = pool_hits(cold, n, 'lfu', 8)
        row['cold start, profile'] = pool_hits(cold, n, 'lfu', 8, warm=profile)
        rows[f'{share:.0%}'] = row
    return rows


def report(d:dict) -> str:
    out = [f"{d['date']}: {d['tokens']} held-out tokens per checkpoint (the first half makes the profile, the second is "
           f"replayed); hit rates of a pool shared by every layer, by its share of all the experts", d['routing'], '']
    for name, rows in d['rows'].items():
        cols = list(next(iter(rows.values())))
        out.append(f"  {name:26} " + ' '.join(f"{c:>10}" for c in cols[:4]) + f" {'cold start':>11} {'+ profile':>10}")
        for share, row in rows.items():
            out.append(f"  {'pool ' + share:26} " + ' '.join(f"{row[c]:10.1%}" for c in cols[:4])
                       + f" {row['cold start']:11.1%} {row['cold start, profile']:10.1%}")
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l'))
    ap.add_argument('--tokens', type=int, default=1024)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'pool_policy'))
    ap.add_argument('--report', action='store_true')
    a = ap.parse_args()
    if a.report: return print(report(json.loads(Path(a.out + '.json').read_text())))
    from edge0.harness import routing_report
    mlx = Path(a.model)
    cal = mlx.with_name(mlx.name + '-calibrated')
    checkpoint(mlx, SHAPE_16L), checkpoint(cal, SHAPE_16L_CALIBRATED)
    d = dict(date=time.strftime('%Y-%m-%d %H:%M'), tokens=a.tokens, routing='\n'.join(map(routing_report, (mlx, cal))),
             rows={})
    print(d['routing'], flush=True)
    for m in (mlx, cal):
        t0 = time.time()
        d['rows'][m.name] = measure(trace_of(m, a.tokens), SHAPE_16L['num_experts'])
        print(f"  {m.name}: {time.time() - t0:.0f} s", flush=True)
    text = report(d)
    Path(a.out + '.json').write_text(json.dumps(d, indent=1))
    Path(a.out + '.txt').write_text(text + '\n')
    print('\n' + text)


if __name__ == '__main__': main()
