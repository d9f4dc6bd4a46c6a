"""Lower-bit expert copies (`edge0 convert --low-bits 2,3`, served with `--low-bits B`): what they cost in quality and
what they save in bytes a token and in tok/s, from one run.

    python bench/low_bits.py                    # every part, writes bench/results/low_bits.{txt,json}
    python bench/low_bits.py --parts quality
    python bench/low_bits.py --report           # the tables again from the json

The serving rules (edge0.decode, "Lower-bit copies"): in `routing` with exact top-M, the K-M slots beside the own M
heaviest are read as copies (those the flush staged at int4 excepted); in `off`, every expert weighing less than
`--low-below`. A prompt is always read at int4. Arms, each against its all-int4 twin:

    off int4 | off, under weight 0.1 at 2 bits | exact top-2 int4 | exact top-2, other 6 at 3 bits | ... at 2 bits

Parts:
- quality: `edge0.ladder.ladder` on the code teacher (edge0-tiny-code, K=8, the held-out Python excerpt, 24 windows x
  256 tokens): perplexity, top-1 agreement and KL(teacher || served) per rung, the copies computed exactly as the
  decoder serves them (`recovery.StudentPath.low`).
- tiny: the same teacher converted with its copies (torch-cpu layout), the torch step decoding 64 tokens with the pool
  bounded to a quarter of its experts (so that experts are read): MiB read a token, the share read as copies, tok/s
  (the reads come from the page cache: the tiny teacher's speed is compute's).
- capped: the 1.85 GB synthetic with routing calibrated to trained MoEs' (build/bench/qwen3moe-16l-calibrated, its
  routing statistics printed first; heads warm-started from its routers) converted with its copies, under 600 and 1200
  MB caps and under 1200 MB with the disk held to an eMMC's 277 MB/s (a child cgroup: memory without swap, a blkio read
  throttle; page cache dropped, direct reads, the default budget), each arm in its own process, arms alternating over
  rounds: tok/s, MiB read a decode step, the share asked as copies, ms blocked a step; the disk's rate B probed in the
  same run (or the throttle's rate) and the bound max(compute, MiB / B).
"""
import argparse, json, os, shutil, statistics, sys, time
from pathlib import Path
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_budget import checkpoint, SHAPE_16L_CALIBRATED  # noqa: E402  built and converted where missing
from cpu_step import warm_heads  # noqa: E402
from direct_reads import NO_SWAP, disk  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20
ARMS = {'off int4': ('off', 0, None, None), 'off, under 0.1 at 2 bits': ('off', 0, 2, 0.1),
        'top-2 int4': ('routing', 2, None, None), 'top-2, other 6 at 3 bits': ('routing', 2, 3, None),
        'top-2, other 6 at 2 bits': ('routing', 2, 2, None)}
BASELINE = {'off, under 0.1 at 2 bits': 'off int4', 'top-2, other 6 at 3 bits': 'top-2 int4',
            'top-2, other 6 at 2 bits': 'top-2 int4'}


def with_copies(src:Path, dst:Path) -> Path:
    "`src` (an mlx-lm int4 checkpoint, heads beside it) converted to the torch-cpu layout with 2- and 3-bit copies"
    from edge0.ladder import low_copy_of
    t0 = time.time()
    out = low_copy_of(src, dst, (2, 3), 'torch-cpu')  # converted again only where missing or stale
    if time.time() - t0 > 5: print(f'converted {src.name} -> {dst} (torch-cpu, --low-bits 2,3): {time.time() - t0:.0f} s')
    return out


class Logits:
    "A torch step whose log-probabilities are kept, one row a step"
    def __init__(self, step): self.step, self.rows = step, []
    def __call__(self, ids):
        import torch
        out = self.step(ids)
        self.rows.append(torch.log_softmax(out.float(), -1).numpy())
        return out
    def __getattr__(self, name): return getattr(self.step, name)


def decode_arm(model:str, mode:str, exact_top:int, low_bits, low_below, tokens:int, prompt_len:int,
               pool_mib:float|None=None, seed:int=0, stage_ahead:int|None=None, logits_to:str|None=None) -> dict:
    """Child or in-process: the torch step decoding `tokens` in one arm; per decode step the streaming counters.
    `logits_to`: the tokens after the prompt are forced (random, from `seed`, the same in every arm) and each decode
    step's log-probabilities saved there (`np.save`, (tokens, V)), so that arms compare token by token"""
    from edge0 import decode, torchstep
    from edge0.streaming import StreamOptions, reset_stats, stats as stream_stats
    opts = StreamOptions(kernels='torch', low_bits=low_bits, low_below=low_below, stage_ahead=stage_ahead,
                         pool_bytes='auto' if pool_mib is None else int(pool_mib * MiB))
    h = decode.load(model, mode, exact_top=exact_top, options=opts)
    try:
        rng = np.random.default_rng(seed)
        prompt = rng.integers(10, h.model.args.vocab_size, prompt_len).tolist()
        step = torchstep.TorchStep(h)
        if logits_to: step = Logits(step)
        force = rng.integers(10, h.model.args.vocab_size, tokens).tolist() if logits_to else None
        gen = decode.generate_ids(step, prompt, tokens + 1, force=force)
        next(gen)
        reset_stats(h.engine)
        h.decoder.stats.low_asked = 0
        t0 = time.perf_counter()
        for _ in gen: pass
        dt = time.perf_counter() - t0
        ss, dec = stream_stats(h.engine), h.decoder.stats
        if logits_to: np.save(logits_to, np.stack(step.rows[1:]))  # the decode steps, not the prompt's
        tot, n_exp = ss['total'], tokens * len(h.spec.moe_layers) * h.k
        return dict(tps=tokens / dt, step_ms=1e3 * dt / tokens, blocked_ms=tot['blocked_ms'] / tokens,
                    mib=tot['bytes_read'] / tokens / MiB, loads=tot['loads'] / tokens, low_loads=tot['low_loads'] / tokens,
                    upgraded=tot['low_upgraded'] / tokens,
                    low_share=dec.low_asked / n_exp, exact_read=dec.exact_read / tokens,
                    pool_mib=(ss['pool']['budget_bytes'] or 0) / MiB, direct=h.engine.store.reader.direct)
    finally: h.close()


def quality(windows:int) -> list:
    from edge0.ladder import ladder
    rows = ladder('edge0-tiny-code', 8, str(ROOT / 'build' / 'teachers'), adapters={}, exact_adapters={}, exact=(2,),
                  windows=windows, low=(3, 2), low_top=2, low_below=0.1)
    return [dict(rung=r['rung'], ppl=r['ppl'], agreement=r['agreement'], kl=r['kl'], sample=r['sample']['text'])
            for r in rows]


def tiny(model:Path, tokens:int, rounds:int) -> dict:
    "The code teacher's copies, in-process, its pool a quarter of its experts"
    from edge0.store import ExpertStore
    st = ExpertStore(model, residency=False)
    pool = st.expert_nbytes * st.spec.num_experts * len(st.spec.moe_layers) / 4 / MiB
    st.close()
    rows = {}
    for r in range(rounds):
        for name, arm in (ARMS.items() if r % 2 == 0 else reversed(ARMS.items())):
            res = decode_arm(str(model), *arm, tokens, 16, pool)
            rows.setdefault(name, []).append(res)
            print(f"  tiny round {r + 1} {name:26} {res['tps']:6.1f} tok/s, {res['mib']:.2f} MiB read a token, "
                  f"{res['low_share']:.0%} of the experts asked as copies", flush=True)
    return dict(pool_mib=pool, rows=rows)


def capped(model:Path, conditions:list, tokens:int, prompt:int, rounds:int) -> dict:
    "Every arm under each `(cap MB, disk MB/s or None)`, in its own process, page cache dropped first"
    from edge0.conditions import Cgroup, evict, memory_cap, read_throttle, run_child
    rows = {}
    for cap, rate in conditions:
        where = f"{cap} MB" + (f", {rate:g} MB/s" if rate else '')
        for r in range(rounds):
            for name, arm in (ARMS.items() if r % 2 == 0 else reversed(ARMS.items())):
                evict(model)
                cg = Cgroup({**memory_cap(int(cap * MiB)), **(read_throttle(model, rate) if rate else {})},
                            optional=NO_SWAP)
                try: res = run_child(decode_arm, str(model), *arm, tokens, prompt, cgroup=cg, timeout=1800)
                finally: cg.close()
                res = res.get('result') or res
                rows.setdefault(f'{where}/{name}', []).append(res)
                print(f"  {where} round {r + 1} {name:26} " + (
                    f"{res['tps']:5.2f} tok/s, {res['mib']:.1f} MiB read a step ({res['low_loads']:.0f} of "
                    f"{res['loads']:.0f} loads copies, {res['upgraded']:.0f} copies served at int4), "
                    f"{res['blocked_ms']:.0f} of {res['step_ms']:.0f} ms blocked, pool "
                    f"{res['pool_mib']:.0f} MiB" if 'tps' in res else f"failed: {str(res.get('stderr', ''))[-300:]}"),
                    flush=True)
    return rows


def med(rows:list, key:str) -> float: return statistics.median(r[key] for r in rows)


def report(d:dict) -> str:
    out = [f"{d['date']}  {d['machine']}", d.get('routing', ''), '']
    if 'quality' in d:
        out += [f"quality: edge0-tiny-code K=8, {d['windows']} held-out windows x 256 tokens (the Python excerpt), "
                "KL(teacher || served) per token", f"  {'rung':40} {'ppl':>6} {'top-1':>6} {'KL':>7}"]
        out += [f"  {r['rung']:40} {r['ppl']:6.1f} {r['agreement']:6.3f} {r['kl']:7.4f}" for r in d['quality']]
        out.append('')
    if 'tiny' in d:
        t = d['tiny']
        out += [f"tiny: edge0-tiny-code (torch-cpu, with copies), the torch step, {d['tokens_tiny']} tokens, pool "
                f"{t['pool_mib']:.1f} MiB (a quarter of the experts); medians of {d['rounds']} rounds, page cache warm",
                f"  {'arm':28} {'tok/s':>7} {'MiB/token':>10} {'vs int4':>8} {'asked as copies':>16}"]
        for name, rows in t['rows'].items():
            base = BASELINE.get(name)
            rel = f"{med(rows, 'mib') / med(t['rows'][base], 'mib'):8.2f}" if base else f"{'':8}"
            out.append(f"  {name:28} {med(rows, 'tps'):7.1f} {med(rows, 'mib'):10.3f} {rel} {med(rows, 'low_share'):16.0%}")
        out.append('')
    if 'capped' in d:
        B = d['disk']['best_mib_s']
        out += [f"capped: {d['model']}, the torch step, {d['tokens']} tokens after a {d['prompt']}-token prompt, direct "
                f"reads, default budget; disk B = {B:.0f} MiB/s (probed in this run"
                + (f", {d['disk_after']['best_mib_s']:.0f} at its end)" if 'disk_after' in d else ')')
                + f"; medians of {d['rounds']} rounds",
                f"  {'cap, disk':>18} {'arm':28} {'tok/s':>6} {'x int4':>7} {'MiB/step':>9} {'x int4':>7} {'asked':>7} "
                f"{'blocked ms':>10} {'step ms':>8} {'bound ms':>9} {'of bound':>9}"]
        for key, runs in d['capped'].items():
            rows, cap, name = [r for r in runs if 'tps' in r], *key.rsplit('/', 1)  # a condition may say MB/s
            if not rows:
                why = str(runs[0].get('stderr', '')).strip().splitlines()
                out.append(f"  {cap:>18} {name:28} " + ('refused: ' + why[-1].split(': ', 1)[-1][:110] if why else
                                                         'killed' if runs[0].get('killed') else 'failed'))
                continue
            base = [r for r in d['capped'].get(f"{cap}/{BASELINE.get(name)}", []) if 'tps' in r]
            comp, rate = med(rows, 'step_ms') - med(rows, 'blocked_ms'), B
            if ', ' in cap: rate = min(B, float(cap.split(', ')[1].split()[0]) * 1e6 / MiB)  # the throttle's rate
            bound = max(comp, med(rows, 'mib') / rate * 1e3)
            xt = f"{med(rows, 'tps') / med(base, 'tps'):7.2f}" if base else f"{'':7}"
            xm = f"{med(rows, 'mib') / med(base, 'mib'):7.2f}" if base else f"{'':7}"
            out.append(f"  {cap:>18} {name:28} {med(rows, 'tps'):6.2f} {xt} {med(rows, 'mib'):9.1f} {xm} "
                       f"{med(rows, 'low_share'):7.0%} {med(rows, 'blocked_ms'):10.0f} {med(rows, 'step_ms'):8.0f} "
                       f"{bound:9.0f} {bound / med(rows, 'step_ms'):9.0%}")
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l-calibrated'))
    ap.add_argument('--parts', default='quality,tiny,capped')
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--conditions', default='600,1200,1200@277', help='memory caps, MB (MiB), comma-separated; CAP@RATE '
                    'also holds the disk to RATE MB/s (277: an eMMC, edge0.conditions.TIERS)')
    ap.add_argument('--tokens', type=int, default=24)
    ap.add_argument('--tokens-tiny', type=int, default=64)
    ap.add_argument('--prompt', type=int, default=5)
    ap.add_argument('--windows', type=int, default=24)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'low_bits'))
    ap.add_argument('--report', action='store_true')
    a = ap.parse_args()
    if a.report: return print(report(json.loads(Path(a.out + '.json').read_text())))
    from edge0.files import teacher_path
    from edge0.harness import routing_report
    t0, parts = time.time(), a.parts.split(',')
    cpu = next((l.split(':', 1)[1].strip() for l in Path('/proc/cpuinfo').read_text().splitlines()
                if l.startswith('model name')), '?')
    flags = Path('/proc/cpuinfo').read_text()
    d = dict(date=time.strftime('%Y-%m-%d %H:%M'), machine=f"{cpu} ({'avx512f' if 'avx512f' in flags else 'no avx512f'}), "
             f"{os.cpu_count()} cores", rounds=a.rounds, tokens=a.tokens, tokens_tiny=a.tokens_tiny, prompt=a.prompt,
             windows=a.windows, conditions=[(int(c.split('@')[0]), float(c.split('@')[1]) if '@' in c else None)
                                            for c in a.conditions.split(',')])
    save = lambda: Path(a.out + '.json').write_text(json.dumps(d, indent=1))
    mlx_model = Path(a.model)
    if 'capped' in parts:
        packed = checkpoint(mlx_model, SHAPE_16L_CALIBRATED)  # the mlx-lm checkpoint and its torch-cpu conversion
        if not (mlx_model / 'prerouter.safetensors').exists(): warm_heads(mlx_model, packed)
        model = with_copies(mlx_model, mlx_model.with_name(mlx_model.name + '-torch-cpu-low'))
        d['model'] = (f"{model.name} (int4 {sum(f.stat().st_size for f in model.glob('model*.safetensors')) / 1e9:.2f} GB, "
                      f"2-bit {sum(f.stat().st_size for f in model.glob('experts-q2-*')) / 1e9:.2f} GB, "
                      f"3-bit {sum(f.stat().st_size for f in model.glob('experts-q3-*')) / 1e9:.2f} GB)")
        d['routing'] = routing_report(mlx_model)
        print(d['routing'], flush=True)
        d['disk'] = disk(model)
    if 'quality' in parts:
        d['quality'] = quality(a.windows)
        save()
        print(report(d), flush=True)
    if 'tiny' in parts:
        code = with_copies(teacher_path('edge0-tiny-code'), ROOT / 'build' / 'bench' / 'edge0-tiny-code-torch-cpu-low')
        d['tiny'] = tiny(code, a.tokens_tiny, a.rounds)
        save()
    if 'capped' in parts:
        d['capped'] = capped(model, d['conditions'], a.tokens, a.prompt, a.rounds)
        d['disk_after'] = disk(model)
        save()
    d['wall_s'] = time.time() - t0
    save()
    text = report(d) + f"\nwall {d['wall_s']:.0f} s"
    Path(a.out + '.txt').write_text(text + '\n')
    print('\n' + text)


if __name__ == '__main__': main()
