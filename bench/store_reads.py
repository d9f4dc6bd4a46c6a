"""The store's read throughput against the disk's, at the expert grain, page cache dropped before every measurement, on the
bare disk and on disks of known speed made with a read throttle.

    python bench/store_reads.py                       # the 2 GB synthetic (build/bench/qwen3moe-2g-torch)
    python bench/store_reads.py MODEL --mb-s 0 500 277 38    # 0: no throttle; writes bench/results/store_reads.{txt,json}

This machine's disk is virtual and the host caches it, so an unthrottled "cold" read is as fast as the host's cache
happens to be that minute (runs disagree by 3x). A read throttle (a child blkio v1 / io v2 cgroup on the checkpoint's disk,
`read_throttle` of edge0.harness) caps what leaves the disk at a known rate whatever the host caches, so
throttled figures repeat. Each throttle runs in its own process inside its cgroup; the measured sequential rate is printed
beside the asked one. Rows (MiB/s): the disk read sequentially in 16 MiB reads (a whole shard); for one expert at a time and
for a layer's K experts at a time, plain `os.pread` of the store's byte ranges against the store's `read_expert` /
`read_experts` on the same draws (each after a cache drop). The gap between a plain row and its store row is what the
store itself costs.
"""
import argparse, json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

def cold(store):
    from edge0.store import drop_cache
    for p in store.fds: drop_cache(p)

def mib_s(nbytes, seconds): return nbytes / seconds / 2**20

def measure(model:Path, draws:int) -> dict:
    "The rows, in this process (which a throttle may hold)"
    from edge0.store import ExpertStore
    st = ExpertStore(model)
    rng, k = np.random.default_rng(0), st.spec.k
    ranges = lambda layer, e: [(t.path, off, ln) for _, t, off, ln in st.ranges(layer, e)]
    rows = {}
    shard = max(st.fds, key=lambda p: os.path.getsize(p))
    cold(st); fd = st.fds[shard]; size = os.path.getsize(shard); t0 = time.perf_counter(); off = 0
    while off < size: off += len(os.pread(fd, 16 << 20, off))
    rows['disk, sequential 16 MiB reads'] = mib_s(size, time.perf_counter() - t0)
    def plain(layer, e): return sum(len(os.pread(st.fds[p], ln, off)) for p, off, ln in ranges(layer, e))
    picks = [(int(rng.choice(st.spec.moe_layers)), rng.choice(st.spec.num_experts, k, replace=False).tolist())
             for _ in range(draws)]
    def timed(fn):
        cold(st); t0 = time.perf_counter(); nb = fn()
        return mib_s(nb, time.perf_counter() - t0)
    rows['one expert, plain pread per range'] = timed(lambda: sum(plain(l, es[0]) for l, es in picks))
    rows['one expert, store.read_expert'] = timed(lambda: sum(st.read_expert(l, es[0])[1].nbytes for l, es in picks))
    pool = ThreadPoolExecutor(2)
    rows[f'K={k} experts, plain pread, 2 threads'] = timed(
        lambda: sum(sum(pool.map(lambda e: plain(l, e), es)) for l, es in picks))
    rows[f'K={k} experts, store.read_experts'] = timed(
        lambda: sum(c.nbytes for l, es in picks for _, c in st.read_experts(l, es)))
    out = dict(expert_mib=st.expert_nbytes / 2**20, ranges=len(st.ranges(0, 0)), k=k, rows=rows)
    st.close()
    return out

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('model', nargs='?', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-2g-torch'))
    ap.add_argument('--mb-s', type=float, nargs='+', default=[0, 500, 277, 38],
                    help='read throttles in MB/s (0: none): sata 500, emmc 277, usb 38')
    ap.add_argument('--draws', type=int, default=96, help='(layer, experts) draws per row')
    ap.add_argument('--out', default=str(ROOT / 'bench/results/store_reads'))
    a = ap.parse_args()
    model = Path(a.model)
    if not (model / 'config.json').exists():
        src = model.with_name(model.name.removesuffix('-torch'))
        sys.exit(f"{model}: no config.json (build it: python -c \"from edge0.zoo import build_synthetic; "
                 f"build_synthetic('{src}')\" && edge0 convert {src} {model} --layout torch-cpu)")
    from edge0.conditions import Cgroup, read_throttle, run_child
    results = dict(model=model.name, date=time.strftime('%Y-%m-%d %H:%M'), tiers=[])
    for mb_s in a.mb_s:
        throttle = Cgroup(read_throttle(model, mb_s)) if mb_s else None
        try:
            r = run_child(measure, str(model), a.draws, cgroup=throttle, timeout=1800)
        finally:
            if throttle: throttle.close()
        if r.get('failed'): sys.exit(f"the measurement at {mb_s or 'no'} MB/s failed:\n{r['stderr']}")
        results['tiers'].append(dict(mb_s=mb_s, **r['result']))
    lines = []
    for t in results['tiers']:
        asked = f"throttled to {t['mb_s']:.0f} MB/s ({t['mb_s'] * 1e6 / 2**20:.0f} MiB/s)" if t['mb_s'] else 'no throttle'
        lines.append(f"{model.name}, {asked}: expert {t['expert_mib']:.2f} MiB in {t['ranges']} ranges; K={t['k']}; "
                     f"{a.draws} draws; page cache dropped before each row")
        lines += [f"  {name:40} {v:8.0f} MiB/s" for name, v in t['rows'].items()]
        one, k = list(t['rows'].values())[1:3], list(t['rows'].values())[3:5]
        lines.append(f"  store / plain: one expert {one[1] / one[0]:.2f}, K experts {k[1] / k[0]:.2f}")
    print('\n'.join(lines))
    Path(a.out).with_suffix('.txt').write_text(f"{results['date']}\n" + '\n'.join(lines) + '\n')
    Path(a.out).with_suffix('.json').write_text(json.dumps(results, indent=1))

if __name__ == '__main__': main()
