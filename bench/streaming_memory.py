"""Streaming decode vs mlx-lm's resident decode on a synthetic Qwen3-MoE checkpoint of >= 2 GB of int4 experts.

    python bench/streaming_memory.py                  # build the checkpoint if missing, run everything, print the table
    python bench/streaming_memory.py --rounds 5 --tokens 48

Prints, per arm (resident mlx-lm, edge0 exact, edge0 staged with its default two buffers, staged with one buffer): decode tok/s, peak active memory, peak RSS, expert bytes
and loads per token, blocked ms per token, cold fraction. Then the targets of the streaming issue:
  1. edge0's peak active memory is at most 15% of the checkpoint's size;
  2. under a memory cap of 1/3 of the checkpoint (a child memory cgroup) edge0 decodes and mlx-lm's resident model cannot;
  3. without a cap, page cache warm, edge0's decode tok/s is at least 0.8x the resident decode's, same run.
Each arm runs in its own process; arm order rotates every round; the page cache is warmed the same way before each
round; medians over rounds. Greedy decoding: every arm must produce the same tokens (checked).
"""
import argparse, json, os, resource, statistics, subprocess, sys, time, uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARMS = ('resident', 'exact', 'staged', 'staged1')
PROMPT = 'The expert weights stay on the disk and only the experts a token uses are read.'

def arm(a):
    "One arm, in this process: load, prefill, decode `tokens` greedily; print one JSON line"
    import mlx_lm
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler
    from edge0.backend import core as B
    from edge0.streaming import load, stats, reset_stats
    t0 = time.perf_counter()
    if a.arm == 'resident':
        model, tok = mlx_lm.load(a.model); model.set_dtype(B.compute_dtype())
    else:
        o = dict(decode_path=a.arm.rstrip('1'), prefill_path='exact', pool_bytes=int(a.pool_mb * 2**20))
        if a.arm.startswith('staged'):  # the slots are reserved from the budget: added, so the LRU is --staged-pool-mb
            from edge0.streaming import model_spec
            from edge0.store import ExpertStore
            buffers, spec = 1 if a.arm == 'staged1' else 2, model_spec(a.model)
            st = ExpertStore(a.model, spec, residency=False)
            slots = len(spec.moe_layers) * a.slots * buffers * st.expert_nbytes
            st.close()
            o.update(slots=a.slots, pool_bytes=int(a.staged_pool_mb * 2**20) + slots, buffers=buffers)
        handle = load(a.model, **o)
        model, tok = handle.model, handle.tokenizer
    load_s = time.perf_counter() - t0
    gen = generate_step(B.array(tok.encode(PROMPT)), model, sampler=make_sampler(temp=0.0))
    toks = [int(next(gen)[0])]  # prefill + first token
    if a.arm != 'resident': reset_stats(handle.engine)
    t1 = time.perf_counter()
    for _ in range(a.tokens): toks.append(int(next(gen)[0]))
    dt = time.perf_counter() - t1
    out = dict(arm=a.arm, load_s=load_s, decode_tps=a.tokens / dt, ms_per_token=1e3 * dt / a.tokens,
               peak_active_mb=B.memory_stats().peak / 2**20, rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               tokens=toks)
    if a.arm != 'resident':
        s = stats(handle.engine)['total']
        n = a.tokens + 1  # mlx-lm computes one step ahead
        out.update(bytes_per_token_mb=s['bytes_read'] / n / 2**20, loads_per_token=s['loads'] / n,
                   blocked_ms_per_token=s['blocked_ms'] / n, cold_fraction=s['cold_fraction'], hits_per_token=s['hits'] / n,
                   peak_active_mb=max(out['peak_active_mb'], stats(handle.engine)['peak_active_bytes'] / 2**20))
    print('RESULT ' + json.dumps(out), flush=True)

class ChildCgroup:
    """A child of this process's own cgroup with `v1` knobs written (the `controller` hierarchy of cgroup v1) or `v2`
    knobs (the unified hierarchy); knobs in `optional` are written only where the kernel has them. Processes started with
    `preexec` join it. `path` is None where none could be made (`errors` says why)"""
    def __init__(self, controller:str, v1:dict, v2:dict, optional=(), prefix:str='edge0-bench'):
        self.path, self.errors = None, []
        for line in Path('/proc/self/cgroup').read_text().splitlines():
            hid, ctrls, rel = line.split(':', 2)
            if controller in ctrls.split(','): base, knobs = Path('/sys/fs/cgroup') / ctrls / rel.lstrip('/'), v1
            elif hid == '0' and ctrls == '' and Path('/sys/fs/cgroup/cgroup.controllers').exists():
                base, knobs = Path('/sys/fs/cgroup') / rel.lstrip('/'), v2
            else: continue
            p = base / f'{prefix}-{uuid.uuid4().hex[:6]}'
            try:
                p.mkdir()
                for knob, value in knobs.items():
                    if knob not in optional or (p / knob).exists(): (p / knob).write_text(str(value))
                self.path = p; break
            except OSError as e:
                self.errors.append(f'cannot create a {controller} cgroup under {base}: {e}')
                if p.exists(): p.rmdir()
    def preexec(self): (self.path / 'cgroup.procs').write_text(str(os.getpid()))
    def close(self):
        if self.path:
            try: self.path.rmdir()
            except OSError: pass

class MemoryCap(ChildCgroup):
    "A child memory cgroup of this process's own (v1 or v2) with a hard limit; processes started with `preexec` join it"
    def __init__(self, nbytes):
        n = int(nbytes)
        super().__init__('memory', {'memory.limit_in_bytes': n, 'memory.memsw.limit_in_bytes': n}, {'memory.max': n},
                         optional=('memory.memsw.limit_in_bytes',))
        for e in self.errors: print(e, file=sys.stderr)

def disk_of(path) -> str:
    "`MAJ:MIN` of the whole disk that holds `path` (a partition's parent disk)"
    d = os.stat(path).st_dev
    dev = Path(f'/sys/dev/block/{os.major(d)}:{os.minor(d)}')
    if (dev / 'partition').exists(): dev = dev.resolve().parent
    return (dev / 'dev').read_text().strip() if (dev / 'dev').exists() else f'{os.major(d)}:{os.minor(d)}'

class ReadThrottle(ChildCgroup):
    "A child blkio (v1) or io (v2) cgroup of this process's own limiting reads from the disk under `path` to `mb_s` MB/s"
    def __init__(self, path, mb_s:float):
        self.dev, bps = disk_of(path), int(mb_s * 1e6)
        super().__init__('blkio', {'blkio.throttle.read_bps_device': f'{self.dev} {bps}'},
                         {'io.max': f'{self.dev} rbps={bps}'}, prefix='edge0-read')
        if self.errors: raise SystemExit(f"{self.errors[0]}; throttling reads needs root on Linux with cgroups")
        if self.path is None: raise SystemExit("no blkio (v1) or io (v2) cgroup controller here: cannot throttle reads")

def run_arm(name, a, cap=None):
    cmd = [sys.executable, __file__, '--arm', name, '--model', str(a.model), '--tokens', str(a.tokens), '--pool-mb', str(a.pool_mb),
           '--staged-pool-mb', str(a.staged_pool_mb), '--slots', str(a.slots)]
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=cap.preexec if cap else None, timeout=1800)
    for line in r.stdout.splitlines():
        if line.startswith('RESULT '): return json.loads(line[7:])
    return dict(arm=name, failed=True, returncode=r.returncode, killed=r.returncode in (-9, 137), stderr=r.stderr[-400:])

def warm(model):
    for f in sorted(Path(model).glob('*.safetensors')):
        with open(f, 'rb') as fh:
            while fh.read(64 << 20): pass

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-2g'))
    ap.add_argument('--layers', type=int, default=20)
    ap.add_argument('--tokens', type=int, default=32)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--pool-mb', type=float, default=256)
    ap.add_argument('--staged-pool-mb', type=float, default=8)
    ap.add_argument('--slots', type=int, default=8)
    ap.add_argument('--arm', choices=ARMS)
    a = ap.parse_args()
    if a.arm: return arm(a)
    model = Path(a.model)
    if not (model / 'config.json').exists():
        from edge0.zoo import build_synthetic
        print(f'building {model} ...', flush=True); build_synthetic(model, num_layers=a.layers)
    size = sum(f.stat().st_size for f in model.glob('*.safetensors'))
    from edge0.store import ExpertStore
    st = ExpertStore(model); experts = st.expert_nbytes * st.spec.num_experts * len(st.spec.moe_layers); st.close()
    print(f'checkpoint {model}: {size / 1e9:.2f} GB on disk, {experts / 1e9:.2f} GB of int4 experts '
          f'({len(st.spec.moe_layers)} layers x {st.spec.num_experts} experts, K={st.spec.k})\n')

    res = {n: [] for n in ARMS}
    for r in range(a.rounds):
        order = ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)]
        for n in order:
            warm(model); res[n].append(run_arm(n, a))
        print(f'round {r + 1}: ' + ', '.join(f"{n} {res[n][-1].get('decode_tps', float('nan')):.2f} tok/s" for n in order), flush=True)
    med = {n: {k: statistics.median(x[k] for x in rs) for k in rs[0] if isinstance(rs[0][k], (int, float))} for n, rs in res.items()}
    same = all(x['tokens'] == res['resident'][0]['tokens'] for rs in res.values() for x in rs)

    print(f"\n{'arm':10}{'tok/s':>8}{'ms/tok':>8}{'peak act MiB':>13}{'RSS MiB':>8}{'MiB/tok':>8}{'loads/tok':>10}{'hits/tok':>9}{'blocked ms/tok':>15}{'cold':>6}")
    for n in ARMS:
        m = med[n]
        print(f"{n:10}{m['decode_tps']:>8.2f}{m['ms_per_token']:>8.1f}{m['peak_active_mb']:>13.0f}{m['rss_mb']:>8.0f}"
              + (f"{m['bytes_per_token_mb']:>8.1f}{m['loads_per_token']:>10.1f}{m['hits_per_token']:>9.1f}{m['blocked_ms_per_token']:>15.1f}{m['cold_fraction']:>6.2f}" if n != 'resident' else ''))
    print(f'(medians of {a.rounds} rounds, {a.tokens} decode tokens each; all arms produced the same greedy tokens: {same})\n')

    cap_bytes = size / 3
    print(f'memory cap: {cap_bytes / 2**20:.0f} MiB (1/3 of the checkpoint), child memory cgroup, no swap')
    cap, capped = MemoryCap(cap_bytes), {}
    if cap.path is None: print('  no memory cgroup could be made here: capped runs skipped')
    else:
        try:
            for n in ARMS:
                capped[n] = run_arm(n, a, cap)
                c = capped[n]
                print(f"  {n:9} " + (f"decoded: {c['decode_tps']:.2f} tok/s, peak RSS {c['rss_mb']:.0f} MiB" if not c.get('failed')
                                     else f"failed (exit {c['returncode']}{', OOM-killed' if c['killed'] else ''})"))
        finally: cap.close()

    print('\ntargets')
    for n in ARMS[1:]:
        frac = med[n]['peak_active_mb'] * 2**20 / size
        print(f"  {n:7} peak active memory {med[n]['peak_active_mb']:.0f} MiB = {100 * frac:.1f}% of the checkpoint (target <= 15%): {'MET' if frac <= 0.15 else 'NOT MET'}")
    if capped:
        ok = capped['resident'].get('failed') and all(not capped[n].get('failed') for n in ARMS[1:])
        print(f"  under the cap edge0 decodes and resident mlx-lm does not: {'MET' if ok else 'NOT MET'}")
    for n in ARMS[1:]:
        ratio = med[n]['decode_tps'] / med['resident']['decode_tps']
        print(f"  {n:7} warm-cache decode {ratio:.2f}x resident (target >= 0.8x): {'MET' if ratio >= 0.8 else 'NOT MET'}")

if __name__ == '__main__': main()
