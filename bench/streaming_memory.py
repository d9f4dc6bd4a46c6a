"""Streaming decode vs mlx-lm's resident decode on a synthetic Qwen3-MoE checkpoint of >= 2 GB of int4 experts, by the harness.

    python bench/streaming_memory.py                  # build the checkpoint if missing, run everything, print the table
    python bench/streaming_memory.py --rounds 5 --tokens 48

Arms (edge0.harness): resident mlx-lm, edge0 exact, edge0 staged with its default two buffers, staged with one buffer. Per arm:
decode tok/s, prefill, peak active memory, peak RSS, expert bytes and loads per step, blocked ms per step, cold fraction. Then the
targets of the streaming issue:
  1. edge0's peak active memory is at most 15% of the checkpoint's size;
  2. under a memory cap of 1/3 of the checkpoint (a child memory cgroup) edge0 decodes and mlx-lm's resident model cannot;
  3. without a cap, page cache warm, edge0's decode tok/s is at least 0.8x the resident decode's, same run.
The protocol is the harness's: each arm in its own process, rotated rounds, one forced token sequence, the page cache warmed
(one untimed read) before every arm's decode, medians over rounds; every exact arm must produce the resident model's tokens.
"""
import argparse, sys
from pathlib import Path
from edge0.harness import Arm, run, table

ROOT = Path(__file__).resolve().parent.parent

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-2g'))
    ap.add_argument('--layers', type=int, default=20)
    ap.add_argument('--tokens', type=int, default=32)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--pool-mib', '--pool-mb', type=float, default=256,
                    help="the exact arm's expert budget, MiB (--pool-mb: the old spelling, deprecated)")
    ap.add_argument('--staged-pool-mib', '--staged-pool-mb', type=float, default=8,
                    help="the staged arms' pool besides their slots, MiB (--staged-pool-mb: deprecated)")
    ap.add_argument('--slots', type=int, default=8)
    a = ap.parse_args()
    model = Path(a.model)
    if not (model / 'config.json').exists():
        from edge0.zoo import build_synthetic
        print(f'building {model} ...', flush=True); build_synthetic(model, num_layers=a.layers)
    size = sum(f.stat().st_size for f in model.glob('*.safetensors'))
    from edge0.store import ExpertStore
    st = ExpertStore(model); spec, nbytes = st.spec, st.expert_nbytes; st.close()
    print(f'checkpoint {model}: {size / 1e9:.2f} GB on disk, {nbytes * spec.num_experts * len(spec.moe_layers) / 1e9:.2f} GB of '
          f'int4 experts ({len(spec.moe_layers)} layers x {spec.num_experts} experts, K={spec.k})\n', flush=True)
    def staged(buffers):  # the slots are reserved from the budget: added, so the LRU is --staged-pool-mib
        slots = len(spec.moe_layers) * a.slots * buffers * nbytes / 2**20
        return Arm(model, 'off', path='staged', pool_mib=a.staged_pool_mib + slots, slots=a.slots, buffers=buffers,
                   total_budget=True, name='staged' if buffers == 2 else 'staged1')
    arms = [Arm(model, 'resident'), Arm(model, 'off', pool_mib=a.pool_mib, name='exact'), staged(2), staged(1)]
    warm = run(arms, a.tokens, rounds=a.rounds, cache='warm', out=ROOT / 'build' / 'harness')
    print(table(warm), flush=True)
    cap = size / 3 / 2**20
    print(f'\nmemory cap: {cap:.0f} MiB (1/3 of the checkpoint), child memory cgroup, no swap', flush=True)
    capped = run(arms, a.tokens, rounds=1, cache='warm', cap_mb=cap, out=ROOT / 'build' / 'harness', routing=warm['routing'])
    print(table(capped))
    w, c = warm['results'], capped['results']
    print('\ntargets')
    for n in ('exact', 'staged', 'staged1'):
        frac = w[n]['peak_active_mb'] * 2**20 / size
        print(f"  {n:7} peak active memory {w[n]['peak_active_mb']:.0f} MiB = {100 * frac:.1f}% of the checkpoint "
              f"(target <= 15%): {'MET' if frac <= 0.15 else 'NOT MET'}")
    ok = not c['resident']['rounds'] and all(c[n]['rounds'] for n in ('exact', 'staged', 'staged1'))
    print(f"  under the cap edge0 decodes and resident mlx-lm does not: {'MET' if ok else 'NOT MET'}")
    for n in ('exact', 'staged', 'staged1'):
        ratio = w[n]['decode_tps'] / w['resident']['decode_tps']
        print(f"  {n:7} warm-cache decode {ratio:.2f}x resident (target >= 0.8x): {'MET' if ratio >= 0.8 else 'NOT MET'}")
    same = all(r.get('same_tokens', True) for r in w.values())
    print(f"  every arm produced the resident model's tokens: {same}")

if __name__ == '__main__': main()
