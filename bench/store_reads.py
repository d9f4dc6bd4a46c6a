"""The store's read throughput against the disk's, at the expert grain, page cache dropped before every measurement.

    python bench/store_reads.py [MODEL]             # default: the 2 GB synthetic of bench/cpu_kernels.py (torch-cpu layout)

Rows (MiB/s, cold): the disk read sequentially in 16 MiB reads (a whole shard); the same byte ranges the store reads for one
expert, read by plain `os.pread` one range at a time (scattered, the disk's figure at this grain); the store's `read_expert`
(ranges + arrays); the K experts of a layer at a time, by plain preads from 2 threads and by the store's `read_experts`
(its thread pool). The gap between the plain-pread rows and the store's is what the store itself costs.
"""
import os, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent

def cold(store):
    from edge0.store import drop_cache
    for p in store.fds: drop_cache(p)

def mib_s(nbytes, seconds): return nbytes / seconds / 2**20

def main():
    from edge0.store import ExpertStore
    model = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / 'build' / 'bench' / 'qwen3moe-2g-torch')
    st = ExpertStore(model)
    rng, k, n = np.random.default_rng(0), st.spec.k, 48
    # every row reads its own draws: the same bytes read twice would come from the host's cache the second time
    draw = lambda: [(int(rng.choice(st.spec.moe_layers)), rng.choice(st.spec.num_experts, k, replace=False).tolist())
                    for _ in range(n)]
    ranges = lambda layer, e: [(t.path, off, ln) for _, t, off, ln in st.ranges(layer, e)]
    print(f"{model.name}: expert {st.expert_nbytes / 2**20:.2f} MiB in {len(st.ranges(0, 0))} ranges; K={k}; {n} draws")
    rows = {}
    shard = max(st.fds, key=lambda p: os.path.getsize(p))
    cold(st); fd = st.fds[shard]; size = os.path.getsize(shard); t0 = time.perf_counter(); off = 0
    while off < size: off += len(os.pread(fd, 16 << 20, off))
    rows['disk, sequential 16 MiB reads'] = mib_s(size, time.perf_counter() - t0)
    def plain(layer, e):
        return sum(len(os.pread(st.fds[p], ln, off)) for p, off, ln in ranges(layer, e))
    picks = draw(); cold(st); t0 = time.perf_counter(); nb = sum(plain(l, es[0]) for l, es in picks)
    rows['one expert, plain pread per range'] = mib_s(nb, time.perf_counter() - t0)
    picks = draw(); cold(st); t0 = time.perf_counter(); nb = sum(st.read_expert(l, es[0])[1].nbytes for l, es in picks)
    rows['one expert, store.read_expert'] = mib_s(nb, time.perf_counter() - t0)
    pool = ThreadPoolExecutor(2)
    picks = draw(); cold(st); t0 = time.perf_counter(); nb = sum(sum(pool.map(lambda e: plain(l, e), es)) for l, es in picks)
    rows[f'K={k} experts, plain pread, 2 threads'] = mib_s(nb, time.perf_counter() - t0)
    picks = draw(); cold(st); t0 = time.perf_counter(); nb = sum(c.nbytes for l, es in picks for _, c in st.read_experts(l, es))
    rows[f'K={k} experts, store.read_experts'] = mib_s(nb, time.perf_counter() - t0)
    for name, v in rows.items(): print(f"  {name:40} {v:8.0f} MiB/s")
    st.close()

if __name__ == '__main__': main()
