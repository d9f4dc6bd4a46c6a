"""Decode and prefill off Metal: edge0's torch step (each step in torch) against the MLX graph with torch's kernels it
replaces, and against llama.cpp reading the same weights, from one run.

    python bench/cpu_step.py                  # build what is missing, run every part, write bench/results/cpu_step.*
    python bench/cpu_step.py --parts uncapped,profile --rounds 3
    python bench/cpu_step.py --report         # the tables again from the json
    python bench/cpu_step.py --parts families # the tier families' table, into the report beside the rest

The checkpoint is the 1.85 GB synthetic Qwen3-MoE (edge0.zoo.build_synthetic: 16 layers, 128 experts, top-8, hidden 1024,
expert FFN 512; build/bench/qwen3moe-16l, the one bench/memory_budget.py uses) in its torch-cpu conversion; its routing
statistics are printed first (degenerate routing would turn streaming into cache hits). llama.cpp is built by
../shared/tools/llama_anchor.sh (its binaries only; the steps are printed when it cannot run), and the checkpoint is
written as a Q4_0 GGUF of the same weights by edge0.gguf.write_q4_0 (from the int4 weights a slice at a time, no bf16
copy). Parts, each arm in its own process, the arms alternating within each round:

- uncapped: everything in memory, page cache warm. edge0 with a pool that holds every expert, `off` (own routing),
  greedy; llama.cpp's llama-bench with --repack 0 and -lm mmap (the weights read where they lie, as edge0 reads them).
  Prefill of 23- and 512-token prompts and decode of 256 tokens after the 23-token prompt, medians of --rounds rounds.
  Targets (issue 48): the torch step >= 0.8x llama.cpp at decode and >= 1.0x at prefill.
- capped: the same decode (--cap-tokens tokens) in a child memory cgroup without swap at 600 and 1200 MB; edge0 with
  its default budget (`auto`) in `off` and in `routing` (heads warm-started from the routers: speed needs heads, not
  good ones); llama.cpp stock (mmap) and tuned (LD_PRELOAD of madv_random.so: MADV_RANDOM on the mapping). Targets:
  edge0 >= 4x stock and >= 2x tuned at both caps.
- big: the Qwen3-30B-A3B shape (48 layers, 128 experts, top-8, hidden 2048, expert FFN 768; about 17 GB, built and
  converted under build/bench where missing, its routing statistics printed first) under a 3 GB cap, page cache cold:
  the torch step `off` and `routing` with the default budget, --big-tokens decode steps after a --big-prompt-token
  prompt. Per step: the time blocked on reads and the MiB read (counted over the decode steps alone). `off` waits out
  each read, so its MiB over its blocked time is this disk's rate at the expert grain as served; with `routing`'s MiB
  over its whole step and a cold probe through the store, the fastest of the three sets the roofline bound of
  `routing`: max(`off`'s compute, `routing`'s reads at that rate). Targets: `off` and `routing` >= 1.0 tok/s,
  `routing` within 1.15x of its bound.
- fresh: as a user runs them, each in a fresh process with the page cache warm: `edge0 generate` on the torch-cpu
  checkpoint with `--pool-mib 2048` (nothing copied or read into a pool first) against `llama-completion --no-repack
  -lm mmap` on the GGUF, the same prompt text, 256 tokens, greedy; prefill and decode tok/s as each prints them,
  medians of --rounds alternating rounds. Targets: decode >= 0.8x llama.cpp and prefill >= 1.0x.
- families: the decode table of the paper's two tier families, a `qwen3_5_moe`- and a `deepseek_v3`-shaped synthetic in
  the same 16-layer shape (about 1.9 GB at int4; build_synthetic's model_type, routing calibrated to trained MoEs', its
  statistics printed first; Qwen3.5's gated-delta layers with full attention every 4th, DeepSeek-V3's MLA and group
  routing, one dense first layer), built, converted and written as Q4_0 GGUFs by bench/gguf_families.py (llama.cpp's
  own converter) where missing, under --families-dir. The `uncapped` rounds, llama.cpp against the torch step; where
  llama.cpp cannot convert, load or run a shape the table says so and gives edge0's figures alone. Run alone, the
  part keeps the other parts' results already in --out.json and adds its table (with its own date and rounds).
- contended: the fresh runs again, --contended-tokens tokens, one round, beside another program computing on every core
  (numpy multiplying 200 x 200 matrices in a loop, its BLAS threads on all cores): `edge0 generate` as a user gets it
  (`import edge0` sets torch's OpenMP threads to spin briefly, then sleep, while they wait: GOMP_SPINCOUNT=10000 and
  OMP_WAIT_POLICY=PASSIVE), the same with libgomp's default spin (GOMP_SPINCOUNT=300000, about 3 ms) and
  llama-completion; a run that does not finish in --contended-timeout seconds says so.
- profile: per decode token of the uncapped run, counted by cProfile over --profile-tokens tokens: MLX evaluations,
  arrays passed between MLX and torch, int4 kernel calls, Python function calls; the MLX graph (before) and the torch
  step (after).
"""
import argparse, cProfile, json, os, pstats, re, shutil, signal, statistics, subprocess, sys, threading, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_budget import SHAPE_16L, checkpoint  # noqa: E402  the same checkpoint, built and converted where missing
from edge0.memory import process_memory  # noqa: E402
import edge0  # noqa: E402

SHAPE_30B = dict(num_layers=48, num_experts=128, k=8, hidden=2048, expert_size=768)  # Qwen3-30B-A3B's MoE shape
# the paper's two tier families, in the 16-layer shape (memory_budget.SHAPE_16L) with routing calibrated to trained MoEs'
FAMILY_MODELS = dict(qwen3_5_moe='qwen35moe-16l-calibrated', deepseek_v3='deepseekv3-16l-calibrated')

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20
NO_SWAP = ('memory.memsw.limit_in_bytes', 'memory.swap.max')
ANCHOR = ROOT.parent / 'shared' / 'tools' / 'llama_anchor.sh'
SHORT, LONG, DECODE = 23, 512, 256
# llama.cpp (built with OpenMP) as a user runs it: without the OpenMP settings `import edge0` made for edge0's torch
PEER_ENV = {k: v for k, v in os.environ.items() if k not in edge0.OPENMP_SET}


def runs_here(bench:Path, gguf:Path) -> bool:
    """Whether the llama-bench at `bench` runs on this CPU: a build made on a CPU with other instruction sets (AVX512
    where this one has AVX2 only) dies of SIGILL at its first product, so one token is decoded to find out"""
    r = subprocess.run([str(bench), '-m', str(gguf), '-n', '1', '-p', '0', '-r', '1', '-t', '1', '-o', 'json'], env=PEER_ENV,
                       capture_output=True, timeout=600)
    return r.returncode != -signal.SIGILL


def anchor(model:Path, work:Path) -> tuple:
    """`(llama-bench, gguf)`: llama.cpp built for this CPU by llama_anchor.sh (binaries only), and `model` written as a
    Q4_0 GGUF by edge0.gguf.write_q4_0; the steps it needs when it cannot build"""
    from edge0.gguf import write_q4_0
    gguf, bench = work / f'{model.name}-Q4_0.gguf', work / 'bin' / 'llama-bench'
    if not gguf.exists():
        print(f'writing {gguf.name} from the int4 checkpoint {model} (edge0.gguf.write_q4_0) ...', flush=True)
        write_q4_0(model, gguf)
    if bench.exists() and not runs_here(bench, gguf):
        print(f"{bench} was built for another CPU (illegal instruction here): building it again for this one", flush=True)
        shutil.rmtree(work / 'bin')
    if not bench.exists():
        if not ANCHOR.exists():
            sys.exit(f"llama.cpp is not built and {ANCHOR} is missing: build llama.cpp (llama-bench) from the "
                     f"llama-cpp-python==0.3.36 sdist into {work / 'bin'}, then run this again")
        print(f'building llama.cpp with {ANCHOR} (about 15 minutes) ...', flush=True)
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # the sdist: this pip's
        r = subprocess.run(['bash', str(ANCHOR), str(work)], env=env)
        if r.returncode: sys.exit(f"{ANCHOR} failed (exit {r.returncode}); run it by hand: bash {ANCHOR} {work}")
    return bench, gguf


def llama(bench:Path, gguf:Path, what:str, n:int, cap=None, tuned:bool=False, timeout:float=3600) -> dict:
    """One llama-bench test (`pp` prefill or `tg` decode of `n` tokens, 2 threads, mmap, no repacking): tok/s, and the
    process's peak anonymous memory in MiB (`anon_mb`: what it holds besides the mapped weights), sampled every 20 ms;
    past `timeout` seconds it is stopped (`timed_out`: its warm-up token and `n` tokens took longer than that)"""
    flag = '-p' if what == 'pp' else '-n'
    other = '-n' if what == 'pp' else '-p'
    cmd = [str(bench), '-m', str(gguf), flag, str(n), other, '0', '-r', '1', '-t', '2', '--repack', '0', '-lm', 'mmap',
           '-o', 'json']
    env = dict(PEER_ENV, LD_PRELOAD=str(gguf.parent / 'madv_random.so')) if tuned else PEER_ENV
    t0, anon = time.time(), [0]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=cap.preexec if cap else None)
    def watch():
        while p.poll() is None:
            anon[0] = max(anon[0], process_memory(p.pid).anon or 0)
            time.sleep(0.02)
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    try: out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill(); out, err = p.communicate()
        w.join()
        return dict(failed=True, timed_out=True, stderr=f'stopped after {timeout:.0f} s', wall_s=time.time() - t0)
    w.join()
    if p.returncode: return dict(failed=True, returncode=p.returncode, stderr=err[-400:], wall_s=time.time() - t0)
    try: tps = json.loads(out)[0]['avg_ts']
    except (ValueError, LookupError):  # it stopped before its result (seen of llama-completion on DeepSeek-V3)
        return dict(failed=True, returncode=0, stderr=f'no result printed: {err[-400:]}', wall_s=time.time() - t0)
    return dict(tps=tps, anon_mb=anon[0] / 2**20, wall_s=time.time() - t0)


def edge0(model:Path, what:str, n:int, step:bool, cap=None, mode:str='off', pool:str='all', profile:bool=False,
          prompt:int=SHORT) -> dict:
    "One edge0 arm in a child process (`arm`): tok/s of prefill (`pp`, n prompt tokens) or decode (`tg`, n tokens)"
    from edge0.conditions import run_child
    t0 = time.time()
    r = run_child(arm, what, n, str(model), step, mode, pool, profile, prompt, cgroup=cap, timeout=3600)
    return dict(r.get('result') or r, wall_s=time.time() - t0)


def arm(what:str, n:int, model:Path, step:bool, mode:str, pool:str, profile:bool, prompt_len:int=SHORT):
    """Child (`edge0.conditions.run_child`): load, run one prefill or one decode, return its figures; a decode's `steps` are
    the streaming counters of its decode steps alone (reset after the first token), per step"""
    import numpy as np
    from edge0 import decode, torchstep
    from edge0.memory import peak_rss
    from edge0.streaming import StreamOptions, reset_stats, stats as stream_stats
    opts = StreamOptions(kernels='torch', pool_bytes=None if pool == 'all' else 'auto')
    h = decode.load(model, mode, options=opts, hold=pool == 'all')  # capped: the unpredicted layer read on demand
    if pool == 'all':  # every expert in memory before anything is timed, as the MLX graph's resident layers
        for layer in h.spec.moe_layers: h.engine.keep_resident(layer)
    config = json.loads((Path(model) / 'config.json').read_text())
    vocab = (config.get('text_config') or config)['vocab_size']  # Qwen3.5's in its text_config
    prompt = np.random.default_rng(0).integers(10, vocab, prompt_len if what == 'tg' else n).tolist()
    st = torchstep.TorchStep(h) if step else None
    def run(tokens:int, pr=None):
        "`(seconds to the first token, seconds of the decode steps after it)`; `pr` profiles the decode steps"
        gen = (decode.generate_ids(st, prompt, tokens) if step else
               decode.generate_ids(h.model, prompt, tokens, decoder=h.decoder))
        t0 = time.perf_counter()
        next(gen)
        reset_stats(h.engine)  # what follows is the decode steps'
        t1 = time.perf_counter()
        if pr: pr.enable()
        for _ in gen: pass
        if pr: pr.disable()
        return t1 - t0, time.perf_counter() - t1
    run(2)  # warm: the page cache, the pool, the allocator
    if profile:
        pr = cProfile.Profile()
        _, dt = run(n + 1, pr)
        return dict(profile=counts(pstats.Stats(pr), n), tps=n / dt)
    first, rest = run(1 if what == 'pp' else n + 1)
    tps = len(prompt) / first if what == 'pp' else n / rest
    ss = stream_stats(h.engine)
    tot, dec = ss['total'], h.decoder.stats
    steps = dict(step_ms=1e3 * rest / n, blocked_ms=tot['blocked_ms'] / n, mb=tot['bytes_read'] / n / MiB,
                 loads=tot['loads'] / n, hits=tot['hits'] / n, background_loads=dec.background_loads / n,
                 dropped=dec.dropped, pool_mib=(ss['pool']['budget_bytes'] or 0) / MiB, slot_mb=ss['slot_bytes'] / MiB,
                 rss_mb=peak_rss() / MiB)
    return dict(tps=tps, prompt=len(prompt), tokens=n, steps=steps)


def counts(st:pstats.Stats, n:int) -> dict:
    "Per decode token (`n` of them): MLX evaluations, arrays converted between MLX and torch, int4 kernel calls"
    by = {}
    for (file, line, fn), (cc, nc, tt, ct, callers) in st.stats.items():
        by[(Path(file).name, fn)] = by.get((Path(file).name, fn), 0) + nc
    pick = lambda pred: sum(c for (f, fn), c in by.items() if pred(f, fn))
    return dict(
        mlx_evals=pick(lambda f, fn: fn in ('eval', 'async_eval') and f == 'core.py') / n,
        crossings=pick(lambda f, fn: fn in ('to_torch', 'from_torch') and f == 'quant.py') / n,
        int4_calls=pick(lambda f, fn: '_weight_int4pack_mm_for_cpu' in fn) / n,
        python_calls=sum(c for (f, fn), c in by.items() if f != '~') / n)


def median_of(rows:list) -> float|None:
    ok = [r['tps'] for r in rows if not r.get('failed')]
    return statistics.median(ok) if ok else None


def alternate(a, arms:dict) -> dict:
    "`arms` (`{name: f(what, n)}`) over prefill 23 and 512 and decode 256, alternating their order each round"
    tests = [('pp', SHORT), ('pp', LONG), ('tg', DECODE)]
    rows = {f'{name}/{w}{n}': [] for name in arms for w, n in tests}
    for r in range(a.rounds):
        for w, n in tests:
            for name, f in (arms.items() if r % 2 == 0 else reversed(arms.items())):
                res = f(w, n)
                rows[f'{name}/{w}{n}'].append(res)
                print(f"  round {r + 1} {name:17} {w}{n:<4} " + (f"{res['tps']:8.1f} tok/s" if not res.get('failed')
                      else f"failed: {res.get('stderr', '')[-200:]}"), flush=True)
    return rows


FRESH_PROMPT = "It was a bright cold day in April, and the clocks were"  # about 23 tokens, as SHORT
EDGE0_RATES = re.compile(r"prefill (\d+) tokens at ([\d.]+) tok/s \| decode (\d+) tokens at ([\d.]+) tok/s")


def fresh_edge0(model:Path, n:int, env:dict|None=None, timeout:float=3600) -> dict:
    "`edge0 generate` in a fresh process, as a user runs it: its own prefill and decode figures"
    cmd = [sys.executable, '-m', 'edge0', 'generate', '-m', str(model), '--pool-mib', '2048', '-p', FRESH_PROMPT,
           '--max-tokens', str(n), '--ignore-chat-template']
    t0 = time.time()
    try: r = subprocess.run(cmd, capture_output=True, text=True, errors='replace', timeout=timeout,
                            env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired: return dict(failed=True, timed_out=timeout, wall_s=time.time() - t0)
    m = EDGE0_RATES.search(r.stdout + r.stderr)
    if r.returncode or not m:
        return dict(failed=True, returncode=r.returncode, stderr=(r.stderr or r.stdout)[-400:], wall_s=time.time() - t0)
    return dict(prompt=int(m[1]), pp_tps=float(m[2]), tokens=int(m[3]), tg_tps=float(m[4]), wall_s=time.time() - t0)


def fresh_llama(bench:Path, gguf:Path, n:int, tries:int=3, timeout:float=3600) -> dict:
    """`llama-completion` in a fresh process (no repacking, the weights mapped), greedy: its own prompt and eval rates.
    This build sometimes stops mid-generation with exit 0 and no timings (bench/gguf_families.py): tried again"""
    cmd = [str(bench.parent / 'llama-completion'), '-m', str(gguf), '-p', FRESH_PROMPT, '-n', str(n), '--temp', '0',
           '-t', '2', '-c', '1024', '-no-cnv', '--no-repack', '-lm', 'mmap', '--ignore-eos', '--simple-io']
    t0 = time.time()
    for attempt in range(tries):
        try: r = subprocess.run(cmd, capture_output=True, text=True, errors='replace', timeout=timeout, env=PEER_ENV)
        except subprocess.TimeoutExpired: return dict(failed=True, timed_out=timeout, wall_s=time.time() - t0)
        rate = lambda what: re.search(rf"{what} time =\s*[\d.]+ ms /\s*(\d+) (?:tokens|runs).*?([\d.]+) tokens per second",
                                      r.stderr)
        pp, tg = rate('prompt eval'), rate(r'(?<!prompt )\beval')
        if r.returncode == 0 and pp and tg and int(tg[1]) == n - 1: break
    else: return dict(failed=True, returncode=r.returncode, stderr=r.stderr[-400:], wall_s=time.time() - t0)
    return dict(prompt=int(pp[1]), pp_tps=float(pp[2]), tokens=int(tg[1]), tg_tps=float(tg[2]), retries=attempt,
                wall_s=time.time() - t0)


def fresh(a, model, bench, gguf) -> dict:
    "The fresh-process rounds, alternating, after one unrecorded run of each (the page cache warm for both)"
    arms = {'llama.cpp': lambda: fresh_llama(bench, gguf, DECODE), 'edge0 generate': lambda: fresh_edge0(model, DECODE)}
    for f in arms.values(): f()
    rows = {name: [] for name in arms}
    for r in range(a.rounds):
        for name, f in (arms.items() if r % 2 == 0 else reversed(arms.items())):
            res = f()
            rows[name].append(res)
            print(f"  round {r + 1} {name:15} " + (f"prefill {res['prompt']} tokens {res['pp_tps']:7.1f} tok/s, decode "
                  f"{res['tokens']} tokens {res['tg_tps']:6.1f} tok/s" if not res.get('failed') else
                  f"failed (exit {res.get('returncode')}): {res.get('stderr', '')[-200:]}"), flush=True)
    return rows


NEIGHBOUR = 'import numpy as np\na = np.random.rand(200, 200)\nwhile True: a @ a'  # BLAS threads on every core


def contended(a, model, bench, gguf) -> dict:
    "The fresh runs, one round, beside another program computing on every core (`--contended-tokens` tokens each)"
    n, t = a.contended_tokens, a.contended_timeout
    neighbour = subprocess.Popen([sys.executable, '-c', NEIGHBOUR])
    try:
        rows = {'llama.cpp': fresh_llama(bench, gguf, n, tries=1, timeout=t),
                'edge0 generate': fresh_edge0(model, n, timeout=t),
                "edge0, libgomp's default spin": fresh_edge0(model, n, dict(GOMP_SPINCOUNT='300000'), timeout=t)}
    finally: neighbour.kill()
    for name, r in rows.items(): print(f"  {name:30} {r}", flush=True)
    return dict(tokens=n, timeout=t, rows=rows)


def contended_table(c:dict) -> list:
    lines = [f"  {'':30} {'prefill':>8} {'decode':>7}"]
    for name, r in c['rows'].items():
        lines.append(f"  {name:30} " + (f"{r['pp_tps']:>8.2f} {r['tg_tps']:>7.2f}" if not r.get('failed') else
                                         f"did not finish {c['tokens']} tokens in {c['timeout']:.0f} s" if r.get('timed_out')
                                         else f"stopped without its timings, exit 0, after {r['wall_s']:.0f} s (this "
                                         "build's early stop: see fresh_llama)" if r.get('returncode') == 0
                                         else 'failed: ' + r.get('stderr', '')[-200:]))
    return lines


def fresh_table(rows:dict) -> list:
    "Medians of the fresh-process rounds and the targets' verdicts"
    med = {name: {key: statistics.median(r[key] for r in rs if not r.get('failed'))
                  for key in ('prompt', 'pp_tps', 'tokens', 'tg_tps')} if any(not r.get('failed') for r in rs) else None
           for name, rs in rows.items()}
    lines = [f"  {'':15} {'prompt':>6} {'prefill':>8} {'tokens':>6} {'decode':>7}"]
    for name, m in med.items():
        lines.append(f"  {name:15} " + (f"{m['prompt']:>6.0f} {m['pp_tps']:>8.1f} {m['tokens']:>6.0f} {m['tg_tps']:>7.1f}"
                                         if m else 'failed: ' + rows[name][0].get('stderr', '')[-200:]))
    e, l = med.get('edge0 generate'), med.get('llama.cpp')
    if e and l:
        for key, what, want in (('tg_tps', 'decode', 0.8), ('pp_tps', 'prefill', 1.0)):
            x = e[key] / l[key]
            lines.append(f"  target: edge0 generate >= {want}x llama.cpp at {what}: {x:.2f}x -> "
                         f"{'MET' if x >= want else 'NOT MET'}")
    return lines


def uncapped(a, model, bench, gguf) -> dict:
    return alternate(a, {'llama.cpp': lambda w, n: llama(bench, gguf, w, n),
                         'edge0 torch step': lambda w, n: edge0(model, w, n, True),
                         'edge0 MLX graph': lambda w, n: edge0(model, w, n, False)})


def family(a, mt:str, bench:Path) -> dict:
    """One tier family's 2 GB synthetic (built, converted and written as a Q4_0 GGUF where missing; its routing printed
    first) in the uncapped rounds: llama.cpp against edge0's torch step, or edge0 alone where llama.cpp cannot"""
    from edge0.harness import routing_report
    from gguf_families import q4_0_gguf
    mlx_model = Path(a.families_dir) / FAMILY_MODELS[mt]
    model = checkpoint(mlx_model, dict(SHAPE_16L, routing='calibrated', model_type=mt))
    gguf = mlx_model.with_name(mlx_model.name + '-Q4_0.gguf')
    d = dict(model=mlx_model.name, size_gb=sum(f.stat().st_size for f in model.glob('*.safetensors')) / 1e9,
             routing=routing_report(mlx_model))
    print(d['routing'], flush=True)
    try:
        if not bench.exists(): sys.exit(f"{bench} is missing: build llama.cpp with {ANCHOR} {a.llama}")
        if not gguf.exists():
            print(f'writing {gguf.name} (bench/gguf_families.py: HF bf16, convert_hf_to_gguf.py, Q4_0) ...', flush=True)
            q4_0_gguf(mlx_model, gguf, Path(a.llama))
        probe = llama(bench, gguf, 'tg', 1)  # one token: whether this llama.cpp loads and runs the shape
        if probe.get('failed'): d['llama_error'] = f"llama-bench: {probe.get('stderr', '').strip()[-300:]}"
    except SystemExit as e: d['llama_error'] = str(e)[-300:]
    arms = {'edge0 torch step': lambda w, n: edge0(model, w, n, True)}
    if 'llama_error' in d: print(f"  llama.cpp cannot run {mt}: {d['llama_error']}", flush=True)
    else:
        d['gguf_gb'] = gguf.stat().st_size / 1e9
        # stopped at 4 minutes: this llama.cpp decoded the DeepSeek-V3 synthetic at 63 and 4.9 tok/s in
        # two runs and had not finished 256 tokens after 6 minutes in a third
        arms = {'llama.cpp': lambda w, n: llama(bench, gguf, w, n, timeout=240), **arms}
    d['rows'] = alternate(a, arms)
    return d


def family_table(mt:str, f:dict) -> list:
    "A family's rows: tok/s medians of llama.cpp and the torch step, and their ratio, or why llama.cpp has none"
    med = {key: median_of(rows) for key, rows in f['rows'].items()}
    gguf = f" and its Q4_0 GGUF ({f['gguf_gb']:.2f} GB)" if 'gguf_gb' in f else ''
    lines = ['', f"--- {mt}: {f['model']} ({f['size_gb']:.2f} GB int4){gguf}", f['routing'],
             f"  {'':18} {'prefill 23':>10} {'prefill 512':>11} {'decode 256':>10}"]
    for name in ('llama.cpp', 'edge0 torch step'):
        if name == 'llama.cpp' and 'llama_error' in f:
            lines.append(f"  llama.cpp          cannot run this shape: {f['llama_error']}")
            continue
        vals = [med.get(f'{name}/{t}') for t in ('pp23', 'pp512', 'tg256')]
        lines.append(f"  {name:18} " + ' '.join(f"{v:>10.1f}" if v else f"{'failed':>10}" for v in vals))
    ratio = [(med.get(f'edge0 torch step/{t}'), med.get(f'llama.cpp/{t}')) for t in ('pp23', 'pp512', 'tg256')]
    if any(s and l for s, l in ratio):
        lines.append(f"  {'edge0 / llama.cpp':18} " + ' '.join(f"{s / l:>9.2f}x" if s and l else f"{'':>10}"
                                                            for s, l in ratio))
    return lines


def warm_heads(mlx_model:Path, model:Path, k:int=8):
    "Heads warm-started from the next layers' routers, untrained: the routing arms need heads, not good ones"
    from edge0.prerouter import init_prerouter, save_prerouter
    from edge0.streaming import load
    print('  heads for routing: warm-started from the routers, untrained', flush=True)
    with load(model, kernels='torch', pool_bytes=1 << 30) as h:
        pr = init_prerouter(h.spec, h.model, owners=h.spec.moe_layers[:-1], k=k)
    p = save_prerouter(pr, mlx_model, extra=dict(builder='bench/cpu_step.py', steps=0))
    shutil.copy2(p, model / p.name)  # the converted checkpoint accepts its source's heads


def capped(a, model, mlx_model, bench, gguf) -> dict:
    from edge0.conditions import Cgroup, evict, memory_cap
    from edge0.store import drop_cache
    if not (model / 'prerouter.safetensors').exists(): warm_heads(mlx_model, model)
    arms = {'llama.cpp stock': lambda cap: llama(bench, gguf, 'tg', a.cap_tokens, cap),
            'llama.cpp tuned': lambda cap: llama(bench, gguf, 'tg', a.cap_tokens, cap, tuned=True),
            'edge0 off': lambda cap: edge0(model, 'tg', a.cap_tokens, True, cap, 'off', 'auto'),
            'edge0 routing': lambda cap: edge0(model, 'tg', a.cap_tokens, True, cap, 'routing', 'auto')}
    rows = {}
    for cap_mb in a.caps:
        for r in range(a.rounds):
            for name, f in (arms.items() if r % 2 == 0 else reversed(arms.items())):
                evict(model)
                drop_cache(gguf)
                cg = Cgroup(memory_cap(int(cap_mb * MiB)), optional=NO_SWAP)
                try: res = f(cg)
                finally: cg.close()
                rows.setdefault(f'{cap_mb}/{name}', []).append(res)
                print(f"  {cap_mb} MB round {r + 1} {name:16} " + (f"{res['tps']:6.2f} tok/s" if not res.get('failed')
                      else f"failed (exit {res.get('returncode')}): {res.get('stderr', '')[-200:]}"), flush=True)
    return rows


def big(a) -> dict:
    """The 30B shape under a memory cap: the torch step `off` and `routing` (heads warm-started), decode after a short
    prompt, page cache dropped before each arm"""
    from edge0.conditions import Cgroup, evict, memory_cap
    from edge0.harness import routing_report
    mlx_model = Path(a.big_model)
    model = checkpoint(mlx_model, SHAPE_30B)
    d = dict(routing=routing_report(model), cap_mb=a.big_cap, tokens=a.big_tokens, prompt=a.big_prompt,
             size_gb=sum(f.stat().st_size for f in model.glob('*.safetensors')) / 1e9)
    print(d['routing'], flush=True)
    from edge0.measure import expert_reads
    probe = expert_reads(model, batch=SHAPE_30B['k'], batches=48, cold=True)
    d['probe_mib_s'] = probe['mb_s'] * 1e6 / MiB
    print(f"  a cold probe of {SHAPE_30B['k']} random experts of a layer at a time through the store: "
          f"{d['probe_mib_s']:.0f} MiB/s", flush=True)
    if not (model / 'prerouter.safetensors').exists(): warm_heads(mlx_model, model)
    rows = {}
    for r in range(a.rounds):
        for mode in (('off', 'routing') if r % 2 == 0 else ('routing', 'off')):
            evict(model)
            cg = Cgroup(memory_cap(int(a.big_cap * MiB)), optional=NO_SWAP)
            try: res = edge0(model, 'tg', a.big_tokens, True, cg, mode, 'auto', prompt=a.big_prompt)
            finally: cg.close()
            rows.setdefault(mode, []).append(res)
            print(f"  30B {a.big_cap} MB round {r + 1} {mode:8} " + (
                f"{res['tps']:5.2f} tok/s, {res['steps']['mb']:.0f} MiB read and {res['steps']['blocked_ms']:.0f} ms "
                f"blocked a step ({res['wall_s']:.0f} s)" if not res.get('failed') else
                f"failed (exit {res.get('returncode')}): {res.get('stderr', '')[-200:]}"), flush=True)
    d['rows'] = rows
    return d


def big_table(b:dict) -> list:
    "The 30B rows (medians over rounds), its roofline bounds and its targets' verdicts, with the counters' reasons"
    ok = {m: [r for r in rs if not r.get('failed')] for m, rs in b['rows'].items()}
    med = lambda m, key: statistics.median(r['steps'][key] for r in ok[m]) if ok.get(m) else None
    lines = [f"  {'mode':8} {'tok/s':>6} {'step ms':>8} {'blocked':>8} {'compute':>8} {'MiB/step':>9} {'pool MiB':>9} "
             f"{'slots MiB':>9} {'peak RSS':>9}"]
    for m in b['rows']:
        if not ok[m]:
            lines.append(f"  {m:8} failed: {b['rows'][m][0].get('stderr', '').strip().splitlines()[-1:]}")
            continue
        step, blocked = med(m, 'step_ms'), med(m, 'blocked_ms')
        lines.append(f"  {m:8} {statistics.median(r['tps'] for r in ok[m]):>6.2f} {step:>8.0f} {blocked:>8.0f} "
                     f"{step - blocked:>8.0f} {med(m, 'mb'):>9.0f} {med(m, 'pool_mib'):>9.0f} {med(m, 'slot_mb'):>9.0f} "
                     f"{med(m, 'rss_mb'):>9.0f}")
    if not (ok.get('off') and ok.get('routing')): return lines
    served = med('off', 'mb') / (med('off', 'blocked_ms') / 1e3)  # `off` waits out every read: this disk, as served
    hidden = med('routing', 'mb') / (med('routing', 'step_ms') / 1e3)  # at least: routing reads while it computes
    rate = max(served, b['probe_mib_s'], hidden)  # the fastest this disk served in the run
    compute = med('off', 'step_ms') - med('off', 'blocked_ms')
    lines.append(f"  reads: `off` waits out each, so they ran at {served:.0f} MiB/s as it serves them; `routing` read "
                 f"at least {hidden:.0f} MiB/s (its MiB over its whole step); the cold probe {b['probe_mib_s']:.0f} MiB/s. "
                 f"The fastest, {rate:.0f} MiB/s, sets the bounds; `off`'s compute is {compute:.0f} ms a step")
    for m in ('off', 'routing'):
        tps = statistics.median(r['tps'] for r in ok[m])
        lines.append(f"  target: {m} >= 1.0 tok/s: {tps:.2f} -> {'MET' if tps >= 1.0 else 'NOT MET'}")
        if tps < 1.0:
            reads = 1e3 * med(m, 'mb') / rate
            lines.append(f"    why: {med(m, 'mb'):.0f} MiB read a step at {rate:.0f} MiB/s is {reads:.0f} ms a step "
                         f"even with no compute, at most {1e3 / reads:.2f} tok/s on this disk; 1.0 tok/s needs "
                         f"{med(m, 'mb'):.0f} MiB/s, or a cap whose pool holds more of the {b['size_gb']:.1f} GB")
    bound = max(compute, 1e3 * med('routing', 'mb') / rate)
    within = med('routing', 'step_ms') / bound
    lines.append(f"  target: routing within 1.15x of its bound max(compute {compute:.0f} ms, its reads "
                 f"{1e3 * med('routing', 'mb') / rate:.0f} ms) = {bound:.0f} ms: {within:.2f}x -> "
                 f"{'MET' if within <= 1.15 else 'NOT MET'} (blocked {med('routing', 'blocked_ms'):.0f} of "
                 f"{med('routing', 'step_ms'):.0f} ms)")
    if within > 1.15:
        lines.append(f"    why: a step's planned reads start as the step before it ends and run beside its compute, so "
                     f"the step lasts as long as they do; they ran at {hidden:.0f} MiB/s, {hidden / rate:.0%} of the "
                     f"fastest rate, waited on {med('routing', 'blocked_ms'):.0f} ms a step: the reader threads share "
                     f"the two cores with compute ({med('routing', 'step_ms') - med('routing', 'blocked_ms'):.0f} ms "
                     f"a step beside them, {compute:.0f} in `off`)")
    return lines


def profile(a, model) -> dict:
    out = {}
    for name, step in (('MLX graph (before)', False), ('torch step (after)', True)):
        res = edge0(model, 'tg', a.profile_tokens, step, profile=True)
        out[name] = res
        print(f"  {name}: {res.get('profile')}", flush=True)
    return out


def report(d:dict) -> str:
    lines = [f"cpu step, {d['date']}, {d['machine']}: {d['model']}"] + (['', d['routing']] if d.get('routing') else [])
    if d.get('kept'): lines.insert(1, f"({', '.join(d['kept']['parts'])}: from the run of {d['kept']['date']})")
    if 'uncapped' in d:
        u = d['uncapped']
        med = {key: median_of(rows) for key, rows in u.items()}
        lines += ['', f"=== uncapped, page cache warm, medians of {d['rounds']} alternating rounds (tok/s)",
                  f"  {'':18} {'prefill 23':>10} {'prefill 512':>11} {'decode 256':>10}"]
        for name in ('llama.cpp', 'edge0 torch step', 'edge0 MLX graph'):
            vals = [med.get(f'{name}/{t}') for t in ('pp23', 'pp512', 'tg256')]
            lines.append(f"  {name:18} " + ' '.join(f"{v:>10.1f}" if v else f"{'failed':>10}" for v in vals))
        # issue 48's targets (issue 44's were 0.5x at each)
        for t, what, want in (('tg256', 'decode', 0.8), ('pp23', 'prefill 23', 1.0), ('pp512', 'prefill 512', 1.0)):
            s, l, g = med.get(f'edge0 torch step/{t}'), med.get(f'llama.cpp/{t}'), med.get(f'edge0 MLX graph/{t}')
            if s and l: lines.append(f"  target: torch step >= {want}x llama.cpp at {what}: {s / l:.2f}x -> "
                                     f"{'MET' if s / l >= want else 'NOT MET'}" + (f" (the MLX graph: {g / l:.2f}x)" if g else ''))
    if 'capped' in d:
        c = d['capped']
        lines += ['', f"=== decode under memory caps, {d['cap_tokens']} tokens, medians of {d['rounds']} rounds (tok/s)"]
        for cap in d['caps']:
            med = {name: median_of(c.get(f'{cap}/{name}', [])) for name in
                   ('llama.cpp stock', 'llama.cpp tuned', 'edge0 off', 'edge0 routing')}
            lines.append(f"  {cap} MB: " + ', '.join(f"{k} {v:.2f}" if v else f"{k} failed" for k, v in med.items()))
            for name, v in med.items():
                why = [r.get('stderr', '').strip().splitlines()[-1:] for r in c.get(f'{cap}/{name}', []) if r.get('failed')]
                if v is None and why and why[0]: lines.append(f"    {name} failed: {why[0][0]}")
            for e in ('edge0 off', 'edge0 routing'):
                ok = [r['steps'] for r in c.get(f'{cap}/{e}', []) if not r.get('failed') and 'steps' in r]
                if ok:
                    m = {key: statistics.median(r[key] for r in ok) for key in ok[0]}
                    lines.append(f"    {e} a step: {m['step_ms']:.0f} ms, {m['blocked_ms']:.0f} blocked on reads; "
                                 f"{m['mb']:.0f} MiB read ({m['loads']:.0f} experts, {m['background_loads']:.0f} of them "
                                 f"in the background), {m['hits']:.0f} served from memory; pool {m['pool_mib']:.0f} MiB, "
                                 f"slots {m['slot_mb']:.0f} MiB, peak RSS {m['rss_mb']:.0f} MB")
                for peer, want in (('llama.cpp stock', 4), ('llama.cpp tuned', 2)):
                    if med[e] and med[peer]:
                        x = med[e] / med[peer]
                        lines.append(f"    target: {e} >= {want}x {peer}: {x:.2f}x -> {'MET' if x >= want else 'NOT MET'}")
    if 'big' in d:
        b = d['big']
        lines += ['', f"=== the 30B shape ({b['size_gb']:.1f} GB) under a {b['cap_mb']} MB cap: decode {b['tokens']} tokens "
                      f"after a {b['prompt']}-token prompt, page cache cold, default budget, medians of "
                      f"{len(next(iter(b['rows'].values())))} rounds", b['routing']] + big_table(b)
    if 'fresh' in d:
        lines += ['', f"=== fresh processes as a user runs them (edge0 generate --pool-mib 2048, llama-completion "
                      f"--no-repack -lm mmap), page cache warm, {DECODE} tokens, medians of {d['rounds']} alternating "
                      "rounds (tok/s)"] + fresh_table(d['fresh'])
    if 'contended' in d:
        c = d['contended']
        lines += ['', f"=== fresh processes beside another program computing on every core (numpy's matrix products), "
                      f"{c['tokens']} tokens, one round (tok/s)"] + contended_table(c)
    if d.get('families'):
        fam = d['families']
        lines += ['', f"=== the tier families, {fam['date']}, uncapped, page cache warm, medians of {fam['rounds']} "
                      f"alternating rounds (tok/s): llama.cpp --repack 0 -lm mmap, edge0's torch step with every expert "
                      f"in memory, `off`, greedy ({fam.get('wall_s', 0):.0f} s)"]
        for mt, f in fam['runs'].items(): lines += family_table(mt, f)
    if 'profile' in d:
        lines += ['', f"=== per decode token ({d['profile_tokens']} tokens under cProfile, uncapped)"]
        for name, r in d['profile'].items():
            p = r.get('profile')
            if p: lines.append(f"  {name:20} MLX evaluations {p['mlx_evals']:6.1f}, arrays crossing {p['crossings']:6.1f}, "
                               f"int4 kernel calls {p['int4_calls']:6.1f}, Python calls {p['python_calls']:7.0f}")
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l'))
    ap.add_argument('--llama', default=str(ROOT / 'build' / 'llama'), help='where llama.cpp is built')
    ap.add_argument('--parts', default='uncapped,fresh,contended,capped,big,profile')
    ap.add_argument('--big-model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-30b'),
                    help='the 30B-shaped synthetic (built where missing: about 17 GB, and 17 GB more converted)')
    ap.add_argument('--big-cap', type=int, default=3072, help='the memory cap for the 30B shape, MB (MiB)')
    ap.add_argument('--big-tokens', type=int, default=16)
    ap.add_argument('--big-prompt', type=int, default=5)
    ap.add_argument('--families-dir', default=str(ROOT / 'build' / 'bench'),
                    help='where the tier families\' synthetics and their GGUFs are (built where missing)')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--caps', default='600,1200', help='memory caps, MB (MiB), comma-separated')
    ap.add_argument('--cap-tokens', type=int, default=32)
    ap.add_argument('--profile-tokens', type=int, default=64)
    ap.add_argument('--contended-tokens', type=int, default=16)
    ap.add_argument('--contended-timeout', type=float, default=300, help='seconds a contended run may take')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'cpu_step'))
    ap.add_argument('--note', default='', help='a line for the results (e.g. another job shared the CPU)')
    ap.add_argument('--keep', action='store_true', help="keep the results of the parts not run from --out.json")
    ap.add_argument('--report', action='store_true', help='print the tables again from --out.json; run nothing')
    a = ap.parse_args()
    if a.report and not Path(a.out + '.json').exists(): sys.exit(f"{a.out}.json is missing: run the parts first")
    if a.report: return print(report(json.loads(Path(a.out + '.json').read_text())))
    from edge0.harness import routing_report
    a.caps = [int(c) for c in a.caps.split(',')]
    parts = a.parts.split(',')
    t0 = time.time()
    d = dict(date=time.strftime('%Y-%m-%d %H:%M'), machine=f"{os.uname().machine}, {os.cpu_count()} cores",
             model='the tier families\' (below)', rounds=a.rounds, caps=a.caps, cap_tokens=a.cap_tokens,
             profile_tokens=a.profile_tokens, note=a.note)
    if {'uncapped', 'fresh', 'contended', 'capped', 'profile'} & set(parts):  # the Qwen3-MoE checkpoint and its GGUF
        mlx_model = Path(a.model)
        model = checkpoint(mlx_model)
        bench, gguf = anchor(mlx_model, Path(a.llama))
        d['model'] = (f"{model.name} ({sum(f.stat().st_size for f in model.glob('*.safetensors')) / 1e9:.2f} GB) "
                      f"and {gguf.name} ({gguf.stat().st_size / 1e9:.2f} GB)")
        d['routing'] = routing_report(mlx_model)
        print(d['routing'], flush=True)
    # the parts not run now keep their results (a families-only run adds its table to the others')
    if (a.keep or parts == ['families']) and Path(a.out + '.json').exists():
        old = json.loads(Path(a.out + '.json').read_text())
        kept = [p for p in ('uncapped', 'fresh', 'contended', 'capped', 'big', 'families', 'profile')
                if p not in parts and old.get(p)]
        d.update({p: old[p] for p in kept}, kept=dict(date=old['date'], parts=kept))
        if kept and 'routing' not in d: d.update(model=old['model'], routing=old.get('routing', ''))
    save = lambda: Path(a.out + '.json').write_text(json.dumps(d, indent=1))  # after each part: a crash keeps the rest
    if 'uncapped' in parts: d['uncapped'] = uncapped(a, model, bench, gguf)
    save()
    if 'capped' in parts: d['capped'] = capped(a, model, mlx_model, bench, gguf)
    save()
    if 'big' in parts: d['big'] = big(a)
    save()
    if 'fresh' in parts: d['fresh'] = fresh(a, model, bench, gguf)
    save()
    if 'contended' in parts: d['contended'] = contended(a, model, bench, gguf)
    save()
    if 'families' in parts:
        bench = Path(a.llama) / 'bin' / 'llama-bench'
        d['families'] = dict(date=time.strftime('%Y-%m-%d %H:%M'), rounds=a.rounds, note=a.note, runs={})
        for mt in FAMILY_MODELS:
            d['families']['runs'][mt] = family(a, mt, bench)
            save()
        d['families']['wall_s'] = time.time() - t0
    if 'profile' in parts: d['profile'] = profile(a, model)
    d['wall_s'] = time.time() - t0
    text = report(d) + f"\n\n{d.get('note', '')}\nwall {d['wall_s']:.0f} s"
    Path(a.out + '.json').write_text(json.dumps(d, indent=1))
    Path(a.out + '.txt').write_text(text + '\n')
    print('\n' + text)


if __name__ == '__main__': main()
