"""What the MLX <-> torch handoff costs inside a decode step with `kernels='torch'`, measured in place.

    python bench/handoff.py                    # edge0-tiny (converted to the torch-cpu layout in a temporary folder) and,
                                               # when built, the 2 GB synthetic (build/bench/qwen3moe-2g-torch)

Every `to_torch` / `torch_view` / `from_torch` of `edge0.backend.quant` is wrapped: the MLX array going in is evaluated
first (untimed: that is MLX's compute, which the handoff only waits for), then the conversion itself is timed (for a
pooled expert's weights, `torch_view`: made once per array, looked up after), and so is every conversion back.
Per model: decode ms a step (greedy, a pool that holds every expert, after 8 warm-up steps), the part of it spent waiting
for reads, handoffs a step, their ms a step, and their share of the step's compute (the step less its waits): the issue
asks for "a small fraction of a step".
"""
import argparse, json, os, platform, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "The history of the city"

def measure(model_dir:Path, tokens:int) -> dict:
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler
    from edge0.backend import core as B, quant
    from edge0.store import model_spec, ExpertStore
    from edge0.streaming import load, reset_stats, stats
    spec = model_spec(model_dir)
    st = ExpertStore(model_dir, spec, residency=False)
    pool = int(1.2 * len(spec.moe_layers) * spec.num_experts * st.expert_nbytes) + (64 << 20)
    st.close()
    counts = dict(n=0, s=0.0)
    to_torch, from_torch, torch_view = quant.to_torch, quant.from_torch, quant.torch_view
    def timed_to(x):
        B.eval(x)
        t0 = time.perf_counter(); out = to_torch(x)
        counts['n'] += 1; counts['s'] += time.perf_counter() - t0
        return out
    def timed_from(t, dtype=None):
        t0 = time.perf_counter(); out = from_torch(t, dtype); B.eval(out)
        counts['n'] += 1; counts['s'] += time.perf_counter() - t0
        return out
    def timed_view(a):  # a weight's view: made once per array, then looked up
        B.eval(a)
        t0 = time.perf_counter(); out = torch_view(a)
        counts['n'] += 1; counts['s'] += time.perf_counter() - t0
        return out
    quant.to_torch, quant.from_torch, quant.torch_view = timed_to, timed_from, timed_view
    try:
        with load(model_dir, kernels='torch', pool_bytes=pool) as handle:
            gen = generate_step(B.array(handle.tokenizer.encode(PROMPT)), handle.model, sampler=make_sampler(temp=0.0))
            for _ in range(8): next(gen)  # prefill and warm-up
            counts.update(n=0, s=0.0)
            reset_stats(handle.engine)
            t0 = time.perf_counter()
            for _ in range(tokens): next(gen)
            step = (time.perf_counter() - t0) / tokens
            blocked = stats(handle.engine)['total']['blocked_ms'] / 1e3 / tokens  # reads of experts not yet pooled
    finally:
        quant.to_torch, quant.from_torch, quant.torch_view = to_torch, from_torch, torch_view
    return dict(step_ms=1e3 * step, blocked_ms=1e3 * blocked, handoffs=counts['n'] / tokens,
                handoff_ms=1e3 * counts['s'] / tokens, share=counts['s'] / tokens / (step - blocked))

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--tokens', type=int, default=32)
    ap.add_argument('--out', default=str(ROOT / 'bench/results/handoff'))
    a = ap.parse_args()
    from edge0.convert import convert
    from edge0.files import teacher_path
    with tempfile.TemporaryDirectory() as tmp:
        models = [('edge0-tiny', convert(teacher_path('edge0-tiny'), Path(tmp) / 'edge0-tiny-torch', layout='torch-cpu'))]
        big = ROOT / 'build' / 'bench' / 'qwen3moe-2g-torch'
        if (big / 'config.json').exists(): models.append(('2 GB synthetic', big))
        results = dict(date=time.strftime('%Y-%m-%d %H:%M'), machine=f"{platform.machine()}, {os.cpu_count()} cores",
                       tokens=a.tokens, models={})
        lines = [f"MLX <-> torch handoff in a decode step, kernels='torch', {results['date']}, {results['machine']}"]
        for name, d in models:
            r = results['models'][name] = measure(Path(d), a.tokens)
            lines.append(f"  {name:16} decode {r['step_ms']:7.2f} ms a step ({r['blocked_ms']:.2f} of it waiting for reads); "
                         f"{r['handoffs']:5.0f} handoffs a step cost {r['handoff_ms']:6.2f} ms = {r['share']:.1%} of "
                         "the step's compute")
            print(lines[-1], flush=True)
    Path(a.out).with_suffix('.json').write_text(json.dumps(results, indent=1))
    Path(a.out).with_suffix('.txt').write_text('\n'.join(lines) + '\n')

if __name__ == '__main__': sys.exit(main())
