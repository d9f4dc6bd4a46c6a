"""Expert reads past the page cache (`--reader direct`) against reads through it (`pread`), and both against the disk,
on the 1.85 GB synthetic Qwen3-MoE in its torch-cpu conversion, from one run.

    python bench/direct_reads.py                      # build what is missing, run every part, write bench/results/direct_reads.*
    python bench/direct_reads.py --parts store --draws 32
    python bench/direct_reads.py --report             # the tables again from the json

A part left out of --parts is kept from the results already at --out, its heading saying from which run, and its
ratios to B still those of that run's disk.

The checkpoint (edge0.zoo.build_synthetic: 16 layers, 128 experts, top-8, hidden 1024, expert FFN 512; build/bench/
qwen3moe-16l, the one bench/cpu_step.py and bench/memory_budget.py use) has its routing statistics printed first
(degenerate routing would turn reads into cache hits). Parts:

- disk: `measure.disk_rates` at the expert grain (its largest byte range), queue depths 1-16, measured again in this run
  (the disk is virtual: its rate moves with the host's cache, so only figures from one run are compared). B, the disk's
  rate, is the best of these; a second probe at the end of the run says how far it moved.
- store: K random experts of a random layer at a time through `ExpertStore.read_experts`, page cache dropped before each
  arm, arms alternating over rounds: `pread` (2 threads, the old default) and `direct` at depths 8 and 16, and `direct`
  at depth 8 on the same experts stacked tensor by tensor (--stacked: six unaligned ranges an expert, as edge0 converted
  before each expert became one aligned range; kept from an earlier conversion). Per arm:
  MiB/s, this process's CPU ms per MiB read (user + system: what the reads take from compute), and the share of the
  bytes read that the page cache holds afterwards. Target: `direct` at >= 85% of B.
- profile: cold starts (fresh process, page cache dropped) of the calibrated checkpoint under the larger cap, `off`,
  direct reads, without and with a usage profile made by one earlier run on another prompt: tok/s over the first
  tokens, time to the first token, hits and loads a step, experts filled at load and the time it took.
- capped: the torch step decoding with the default budget (`auto`) under 600 and 1200 MB caps, on the checkpoint and on
  its twin with routing calibrated to trained MoEs' (build_synthetic routing='calibrated', qwen3moe-16l-calibrated; its
  routing statistics printed first too), each arm in its own process in a child memory cgroup without swap, page cache
  dropped first: `off` with `pread` and with `direct`, and `routing` (heads warm-started from the routers: speed needs
  heads, not good ones) with `direct`. Per arm: tok/s; per decode step the MiB read, ms blocked on reads, ms of compute
  (the step less the blocked time), the budget's pool; the bound max(compute, MiB / B) and bound / step. Beside them,
  in the same cgroup with the page cache dropped, llama.cpp (llama-bench, 2 threads, --repack 0 -lm mmap; built by
  ../shared/tools/llama_anchor.sh, --llama) decoding a Q4_0 GGUF of each checkpoint's weights written by
  edge0.gguf.write_q4_0: stock, and tuned with MADV_RANDOM on its mapping (LD_PRELOAD of madv_random.so). Targets:
  decode >= 0.8x the bound; `routing` >= 1.25x `off` at 1200 MB on the calibrated routing; edge0's best arm >= 6x
  llama.cpp stock and >= 3x tuned at both caps.
"""
import argparse, json, os, resource, statistics, sys, time
from pathlib import Path
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_budget import checkpoint, SHAPE_16L_CALIBRATED  # noqa: E402  built and converted where missing
from cpu_step import anchor, llama, warm_heads  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20
NO_SWAP = ('memory.memsw.limit_in_bytes', 'memory.swap.max')
ARMS = (('pread', 2), ('direct', 8), ('direct', 16))
DECODE_ARMS = (('off', 'pread'), ('off', 'direct'), ('routing', 'direct'))
LLAMA_ARMS = (('llama.cpp', 'stock'), ('llama.cpp', 'tuned'))  # mmap as it ships, and MADV_RANDOM on the mapping


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def disk(model:Path) -> dict:
    "The disk's rate at the expert grain, measured now (MiB/s by depth, the best depth and rate)"
    from edge0.measure import disk_rates
    r = disk_rates(model, refresh=True)
    return dict(grain=r['size'], direct=r['direct'], mib_s={d: v * 1e6 / MiB for d, v in r['mb_s'].items()},
                best_depth=r['best_depth'], best_mib_s=r['best_mb_s'] * 1e6 / MiB)


def store_arm(model:Path, reader:str, depth:int, draws:int, seed:int) -> dict:
    "`draws` reads of K random experts of a random layer through the store, page cache dropped first"
    from edge0.conditions import evict
    from edge0.store import ExpertStore, cold_share
    st = ExpertStore(model, reader=reader, threads=depth, residency=False)
    rng, k = np.random.default_rng(seed), st.spec.k
    plan = [(int(rng.choice(st.spec.moe_layers)), rng.choice(st.spec.num_experts, k, replace=False).tolist())
            for _ in range(draws)]
    try:
        evict(model)
        c0, t0 = cpu_s(), time.perf_counter()
        got = sum(ls.nbytes for layer, es in plan for _, ls in st.read_experts(layer, es))
        dt, cpu = time.perf_counter() - t0, cpu_s() - c0
        files = sorted({t.path for ts in st.layers.values() for t in ts.values()})
        cached = sum((1 - cold_share(f)) * f.stat().st_size for f in files)  # what the page cache holds of them now
        return dict(reader=reader, depth=depth, direct=st.reader.direct, mib=got / MiB, seconds=dt,
                    mib_s=got / dt / MiB, cpu_ms_per_mib=1e3 * cpu / (got / MiB), cached_share=cached / got)
    finally: st.close()


def decode_arm(model:str, mode:str, reader:str, tokens:int, prompt_len:int, usage:bool=False, seed:int=0):
    """Child (`edge0.conditions.run_child`): the torch step decoding in `mode` with the default budget; per decode step the
    streaming counters (reset after the first token); `usage`: the pool filled from the usage profile at load"""
    from edge0 import decode, torchstep
    from edge0.memory import peak_rss
    from edge0.streaming import StreamOptions, reset_stats, stats as stream_stats
    h = decode.load(model, mode, options=StreamOptions(kernels='torch', reader=reader, usage_profile=usage))
    fill = dict(h.engine.usage_fill)
    vocab = h.model.args.vocab_size
    prompt = np.random.default_rng(seed).integers(10, vocab, prompt_len).tolist()
    st = torchstep.TorchStep(h)
    gen = decode.generate_ids(st, prompt, tokens + 1)
    t0 = time.perf_counter()
    next(gen)
    first = time.perf_counter() - t0
    reset_stats(h.engine)
    t0 = time.perf_counter()
    for _ in gen: pass
    dt = time.perf_counter() - t0
    ss = stream_stats(h.engine)
    tot = ss['total']
    dec = h.decoder.stats
    h.close()  # with `usage`: the requests join the profile
    return dict(tps=tokens / dt, first_s=first, fill=fill, step_ms=1e3 * dt / tokens, blocked_ms=tot['blocked_ms'] / tokens,
                background_loads=dec.background_loads / tokens,
                mib=tot['bytes_read'] / tokens / MiB, loads=tot['loads'] / tokens, hits=tot['hits'] / tokens,
                pool_mib=(ss['pool']['budget_bytes'] or 0) / MiB, rss_mib=peak_rss() / MiB,
                direct=h.engine.store.reader.direct, notes=list(h.notes))


def capped(models:dict, caps:list, tokens:int, prompt:int, rounds:int, ggufs:dict|None=None) -> dict:
    "Each checkpoint under each cap: edge0's arms and, given its GGUF (`ggufs[name] = (llama-bench, gguf)`), llama.cpp's"
    from edge0.conditions import Cgroup, evict, memory_cap, run_child
    from edge0.store import drop_cache
    rows = {}
    for name, model in models.items():
        arms = DECODE_ARMS + (LLAMA_ARMS if ggufs and name in ggufs else ())
        for cap in caps:
            for r in range(rounds):
                for mode, reader in (arms if r % 2 == 0 else arms[::-1]):
                    evict(model)
                    if ggufs and name in ggufs: drop_cache(ggufs[name][1])
                    cg = Cgroup(memory_cap(int(cap * MiB)), optional=NO_SWAP)
                    try:
                        res = (llama(*ggufs[name], 'tg', tokens, cg, tuned=reader == 'tuned') if mode == 'llama.cpp'
                               else run_child(decode_arm, str(model), mode, reader, tokens, prompt,
                                              cgroup=cg, timeout=1800))
                    finally: cg.close()
                    if mode == 'llama.cpp':
                        rows.setdefault(f'{name}/{cap}/{mode}/{reader}', []).append(res)
                        print(f"  {name} {cap} MB round {r + 1} {mode:9} {reader:6} " + (
                            f"{res['tps']:5.2f} tok/s" if 'tps' in res else
                            f"failed: {str(res.get('stderr', ''))[-300:]}"), flush=True)
                        continue
                    res = res.get('result') or res
                    rows.setdefault(f'{name}/{cap}/{mode}/{reader}', []).append(res)
                    print(f"  {name} {cap} MB round {r + 1} {mode:7} {reader:6} " + (
                        f"{res['tps']:5.2f} tok/s, {res['mib']:.1f} MiB read, {res['blocked_ms']:.0f} of "
                        f"{res['step_ms']:.0f} ms blocked a step, pool {res['pool_mib']:.0f} MiB" if 'tps' in res else
                        f"failed: {str(res.get('stderr', ''))[-300:]}"), flush=True)
    return rows


def profile_part(model:Path, cap:int, tokens:int, prompt:int, rounds:int) -> dict:
    """Cold starts (a fresh process, page cache dropped) with and without a usage profile made by one earlier run on
    another prompt, `off`, `direct`, under `cap` MB"""
    import tempfile
    from edge0.conditions import Cgroup, evict, memory_cap, run_child
    home, os.environ['EDGE0_HOME'] = os.environ.get('EDGE0_HOME'), tempfile.mkdtemp(prefix='edge0-usage-')
    rows = {}
    def one(name, usage, seed):
        evict(model)
        cg = Cgroup(memory_cap(int(cap * MiB)), optional=NO_SWAP)
        try: res = run_child(decode_arm, str(model), 'off', 'direct', tokens, prompt, usage, seed,
                             cgroup=cg, timeout=1800)
        finally: cg.close()
        res = res.get('result') or res
        rows.setdefault(name, []).append(res)
        print(f"  profile {name:8} " + (f"{res['tps']:5.2f} tok/s, first token {res['first_s']:.2f} s, "
              f"{res['hits']:.1f} hits and {res['loads']:.1f} loads a step; {res['fill']['bundles']} experts from the "
              f"profile in {res['fill']['seconds']:.2f} s" if 'tps' in res else f"failed: {res.get('stderr', '')[-300:]}"),
              flush=True)
    try:
        one('history', True, 1)  # makes the profile: another prompt
        for r in range(rounds):
            for name in (('without', 'with') if r % 2 == 0 else ('with', 'without')):
                one(name, name == 'with', 0)
    finally:
        if home is None: del os.environ['EDGE0_HOME']
        else: os.environ['EDGE0_HOME'] = home
    return rows


def med(rows:list, key:str) -> float: return statistics.median(r[key] for r in rows)


def report(d:dict) -> str:
    B = d['disk']['best_mib_s']
    out = [f"{d['date']}  {d['machine']}  {d['model']}", d['routing'], '',
           f"disk, random reads of {d['disk']['grain'] >> 10} KiB past the page cache (direct {d['disk']['direct']}), "
           "MiB/s by queue depth: " + ', '.join(f"{k}: {v:.0f}" for k, v in d['disk']['mib_s'].items()),
           f"  B = {B:.0f} MiB/s (depth {d['disk']['best_depth']}); probed again at the end: "
           f"{d['disk_after']['best_mib_s']:.0f} MiB/s" if 'disk_after' in d else f"  B = {B:.0f} MiB/s"]
    kept = lambda part: (f" (kept from the run of {d['kept'][part]}: not run again)"
                         if part in d.get('kept', {}) else '')
    disk_of = lambda part: d['kept_disk'][part] if part in d.get('kept', {}) else d  # the probes of the part's own run
    if 'store' in d:
        B, disk_after = disk_of('store')['disk']['best_mib_s'], disk_of('store').get('disk_after')
        out += ['', f"store{kept('store')}: {d['store_k']} random experts of a random layer at a time, {d['draws']} draws, page cache "
                "dropped before each arm; medians of " + f"{d['rounds']} rounds",
                f"  {'arm':26} {'MiB/s':>7} {'of B':>6} {'CPU ms/MiB':>11} {'left in page cache':>19}"]
        for name, rows in d['store'].items():
            out.append(f"  {name:26} {med(rows, 'mib_s'):7.0f} {med(rows, 'mib_s') / B:6.0%} "
                       f"{med(rows, 'cpu_ms_per_mib'):11.2f} {med(rows, 'cached_share'):19.0%}")
        best = max((n for n in d['store'] if n.startswith('direct') and 'stacked' not in n),
                   key=lambda n: med(d['store'][n], 'mib_s'))
        ok = med(d['store'][best], 'mib_s') >= 0.85 * B
        after = f", {med(d['store'][best], 'mib_s') / disk_after['best_mib_s']:.0%} of the probe at the end" \
            if disk_after else ''
        if 'store' in d.get('kept', {}): out.append(f"  (B of that run: {B:.0f} MiB/s)")
        out.append(f"  target: direct at >= 85% of B: {best} at {med(d['store'][best], 'mib_s') / B:.0%}{after}: "
                   + ('met' if ok else 'NOT met'))
    if 'capped' in d:
        B = disk_of('capped')['disk']['best_mib_s']
        out += ['', f"capped decode{kept('capped')}: the torch step, default budget, {d['tokens']} tokens after a {d['prompt']}-token "
                f"prompt, page cache dropped; medians of {d['rounds']} rounds; per step",
                f"  {'checkpoint/cap/mode/reader':44} {'tok/s':>6} {'MiB':>6} {'blocked':>8} {'compute':>8} "
                f"{'MiB/B':>7} {'bound':>7} {'of step':>8} {'pool MiB':>8}"]
        for name, rows in d['capped'].items():
            if '/llama.cpp/' in name: continue  # below, beside edge0's best
            rows = [r for r in rows if 'tps' in r]
            if not rows:
                why = str(d['capped'][name][0].get('stderr', '')).strip().splitlines()[-1:] or ['?']
                out.append(f"  {name:44} refused: {why[0].split(': ', 1)[-1][:150]}")
                continue
            comp = med(rows, 'step_ms') - med(rows, 'blocked_ms')
            io = 1e3 * med(rows, 'mib') / B
            bound = max(comp, io)
            out.append(f"  {name:44} {med(rows, 'tps'):6.2f} {med(rows, 'mib'):6.1f} {med(rows, 'blocked_ms'):6.0f}ms "
                       f"{comp:6.0f}ms {io:5.0f}ms {bound:5.0f}ms {bound / med(rows, 'step_ms'):8.0%} "
                       f"{med(rows, 'pool_mib'):8.0f}")
        tps = lambda key: med(d['capped'][key], 'tps') if all('tps' in r for r in d['capped'].get(key, [{}])) else None
        for name in d['checkpoints']:
            for cap in d['caps']:
                p, q, r = (tps(f'{name}/{cap}/{m}/{rd}') for m, rd in DECODE_ARMS)
                if p and q and r:
                    out.append(f"  {name} {cap} MB: off direct / off pread {q / p:.2f}x, routing direct / off direct "
                               f"{r / q:.2f}x")
        out.append("  targets: decode >= 0.8x the bound ('of step': bound / step); routing >= 1.25x off at 1200 MB on "
                   "the calibrated routing")
        peers = [n for n in d['capped'] if '/llama.cpp/' in n]
        if peers:
            out += ['', "against llama.cpp on a Q4_0 GGUF of the same weights (llama-bench, 2 threads, --repack 0 -lm "
                    "mmap; tuned: MADV_RANDOM on the mapping), the same cgroup and page cache dropped; edge0's best arm "
                    "of off/direct and routing/direct"]
            for name in d['checkpoints']:
                for cap in d['caps']:
                    e0 = {m: tps(f'{name}/{cap}/{m}/direct') for m in ('off', 'routing')}
                    best = max((m for m in e0 if e0[m]), key=lambda m: e0[m], default=None)
                    st, tu = (tps(f'{name}/{cap}/llama.cpp/{v}') for v in ('stock', 'tuned'))
                    if best and st and tu:
                        out.append(f"  {name} {cap} MB: llama.cpp stock {st:5.2f}, tuned {tu:5.2f} tok/s; edge0 {best} "
                                   f"{e0[best]:5.2f}: {e0[best] / st:.1f}x stock, {e0[best] / tu:.1f}x tuned")
            out.append("  targets: edge0 >= 6x llama.cpp stock and >= 3x tuned at both caps")
    if 'profile' in d:
        out += ['', f"usage profile{kept('profile')}: cold starts of {d['checkpoints'][-1]} under {d['profile_cap']} MB, `off`, direct "
                f"reads, {d['tokens']} tokens; the profile made by one run on another prompt; medians of {d['rounds']}"]
        for name in ('without', 'with'):
            rows = [r for r in d['profile'].get(name, []) if 'tps' in r]
            if rows: out.append(f"  {name + ' profile':16} {med(rows, 'tps'):6.2f} tok/s, first token "
                                f"{med(rows, 'first_s'):.2f} s, {med(rows, 'hits'):.1f} hits and {med(rows, 'loads'):.1f}"
                                f" loads a step, {statistics.median(r['fill']['bundles'] for r in rows):.0f} experts "
                                f"filled in {statistics.median(r['fill']['seconds'] for r in rows):.2f} s")
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l'))
    ap.add_argument('--parts', default='store,capped,profile')
    ap.add_argument('--draws', type=int, default=48, help='reads of K experts per store arm')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--caps', default='600,1200', help='memory caps, MB (MiB), comma-separated')
    ap.add_argument('--tokens', type=int, default=24)
    ap.add_argument('--prompt', type=int, default=5)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'direct_reads'))
    ap.add_argument('--llama', default=str(ROOT / 'build' / 'llama'), help='where llama.cpp is built (and the GGUFs)')
    ap.add_argument('--no-llama', action='store_true', help='capped: edge0 alone')
    ap.add_argument('--stacked', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l-torch-cpu-stacked'),
                    help="store: the checkpoint's torch-cpu copy with its experts stacked tensor by tensor (as edge0 "
                         "converted before each expert became one aligned range), read beside it")
    ap.add_argument('--note', default='')
    ap.add_argument('--report', action='store_true')
    a = ap.parse_args()
    if a.report: return print(report(json.loads(Path(a.out + '.json').read_text())))
    from edge0.harness import routing_report
    mlx_model = Path(a.model)
    model = checkpoint(mlx_model)
    a.caps = [int(c) for c in a.caps.split(',')]
    t0 = time.time()
    cpu = next((l.split(':', 1)[1].strip() for l in Path('/proc/cpuinfo').read_text().splitlines()
                if l.startswith('model name')), '?')
    d = dict(date=time.strftime('%Y-%m-%d %H:%M'), machine=f"{cpu}, {os.cpu_count()} cores",
             rounds=a.rounds, draws=a.draws, caps=a.caps, tokens=a.tokens, prompt=a.prompt, note=a.note)
    cal_mlx = mlx_model.with_name(mlx_model.name + '-calibrated')
    models = {mlx_model.name: model, cal_mlx.name: checkpoint(cal_mlx, SHAPE_16L_CALIBRATED)}
    d['checkpoints'] = list(models)
    d['model'] = ' and '.join(f"{m.name} ({sum(f.stat().st_size for f in m.glob('model*.safetensors')) / 1e9:.2f} GB)"
                              for m in models.values())
    d['routing'] = '\n'.join(routing_report(m) for m in (mlx_model, cal_mlx))
    print(d['routing'], flush=True)
    d['disk'] = disk(model)
    print(report(d), flush=True)
    save = lambda: Path(a.out + '.json').write_text(json.dumps(d, indent=1))
    parts = a.parts.split(',')
    if Path(a.out + '.json').exists():  # a part not run this time is kept from the results there, with its date
        old = json.loads(Path(a.out + '.json').read_text())
        for part, extra in (('store', ('store_k', 'draws')), ('capped', ()), ('profile', ('profile_cap',))):
            if part not in parts and part in old:
                d.update({key: old[key] for key in (part, *extra) if key in old})
                d.setdefault('kept', {})[part] = (old.get('kept') or {}).get(part, old['date'])
                was = (old.get('kept_disk') or {}).get(part) or {k: old[k] for k in ('disk', 'disk_after') if k in old}
                d.setdefault('kept_disk', {})[part] = was  # its ratios stay those of its own run's disk
    if 'store' in parts:
        from edge0.store import ExpertStore
        st = ExpertStore(model, residency=False)
        d['store_k'] = st.spec.k
        st.close()
        d['store'] = {}
        stacked = Path(a.stacked)  # the same experts stacked tensor by tensor (edge0 before the aligned layout)
        arms = [(model, rd, dp, '') for rd, dp in ARMS] + (
            [(stacked, 'direct', 8, ', stacked')] if (stacked / 'config.json').exists() else [])
        if not (stacked / 'config.json').exists(): print(f"  ({stacked} is missing: no stacked-layout arm)", flush=True)
        for r in range(a.rounds):
            for m, reader, depth, how in (arms if r % 2 == 0 else arms[::-1]):
                res = store_arm(m, reader, depth, a.draws, seed=r)
                d['store'].setdefault(f"{reader} depth {depth}{how}", []).append(res)
                print(f"  store round {r + 1} {reader} depth {depth}{how}: {res['mib_s']:.0f} MiB/s, "
                      f"{res['cpu_ms_per_mib']:.2f} CPU ms/MiB, {res['cached_share']:.0%} left in the page cache",
                      flush=True)
        save()
    if 'capped' in parts:
        for src, m in ((mlx_model, model), (cal_mlx, models[cal_mlx.name])):
            if not (m / 'prerouter.safetensors').exists(): warm_heads(src, m)
        ggufs = None if a.no_llama else {m.name: anchor(m, Path(a.llama)) for m in (mlx_model, cal_mlx)}
        d['capped'] = capped(models, a.caps, a.tokens, a.prompt, a.rounds, ggufs)
        save()
    if 'profile' in parts:
        d['profile_cap'] = a.caps[-1]
        d['profile'] = profile_part(models[cal_mlx.name], a.caps[-1], a.tokens, a.prompt, a.rounds)
        save()
    d['disk_after'] = disk(model)
    d['wall_s'] = time.time() - t0
    text = report(d) + (f"\n\n{a.note}" if a.note else '') + f"\nwall {d['wall_s']:.0f} s"
    save()
    Path(a.out + '.txt').write_text(text + '\n')
    print('\n' + text)


if __name__ == '__main__': main()
