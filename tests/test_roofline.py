"The roofline's theory as a planner uses it: address classes of checkpoints and configs, Theorem 1 against EDF and an exhaustive search."
import json, math, random
import pytest
from edge0.files import InputError, teacher_path
from edge0.roofline import (AddressClass, Job, brute_force_lateness, bytes_by_class, checkpoint_groups, config_groups,
                            deficits, edf, exposed_latency, feasible, gantt, predicted_layers, weight_groups)
from edge0.routing import spec_for
from edge0.store import index_checkpoint, model_spec, read_header

A0, A1, A2, A3 = AddressClass
QWEN3_30B_A3B = dict(model_type='qwen3_moe', hidden_size=2048, num_hidden_layers=48, num_experts=128,
                     num_experts_per_tok=8, moe_intermediate_size=768, intermediate_size=6144, num_attention_heads=32,
                     num_key_value_heads=4, head_dim=128, vocab_size=151936, tie_word_embeddings=False,
                     rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=40960, norm_topk_prob=True,
                     decoder_sparse_step=1, mlp_only_layers=[])

def brute(jobs):
    return brute_force_lateness([j.nbytes for j in jobs], [j.release for j in jobs], [j.deadline for j in jobs])

def all_three(jobs):
    "`(EDF max lateness, largest deficit, exhaustive optimum)` at bandwidth 1"
    return edf(jobs, 1)['max_lateness'], deficits(jobs, 1)[0][0], brute(jobs)

# --- address classes

@pytest.fixture(scope='module')
def tiny():
    return teacher_path('edge0-tiny')

def test_tiny_checkpoint_classes(tiny):
    spec, ts = model_spec(tiny), index_checkpoint(tiny)
    owners = json.loads(read_header(tiny / 'prerouter.safetensors')[1]['owners'])
    pred = predicted_layers(spec, owners)
    assert pred == (2, 3, 4, 5)
    groups = checkpoint_groups(tiny, 8, pred)
    assert sum(g.nbytes for g in groups) == sum(t.nbytes for t in ts.values())  # every tensor in exactly one group
    experts = [g for g in groups if g.name.endswith('.experts')]
    assert [g.cls for g in experts] == [A2, A2, A1, A1, A1, A1]
    assert all(g.per_token == g.nbytes * 8 / 64 for g in experts)
    by = bytes_by_class(groups)
    assert list(by) == list(AddressClass)
    assert by[A0] == 72  # one int4 row of 128: 16 words + 2 scales + 2 biases
    assert by[A1] == 2 * by[A2]
    head = ts['lm_head.weight'].nbytes + ts['lm_head.scales'].nbytes + ts['lm_head.biases'].nbytes
    assert by[A3] == sum(g.nbytes for g in groups if g.cls == A3) and head < by[A3]
    at4 = bytes_by_class(checkpoint_groups(tiny, 4, pred))
    assert (at4[A1], at4[A2], at4[A3]) == (by[A1] / 2, by[A2] / 2, by[A3])

def test_config_agrees_with_checkpoint(tiny):
    config = json.loads((tiny / 'config.json').read_text())
    for k in (8, 4):
        ck, cf = checkpoint_groups(tiny, k, (3,)), config_groups(config, k, predicted=(3,))
        assert [g.name for g in cf] == [g.name for g in ck]
        a, b = bytes_by_class(ck), bytes_by_class(cf)
        assert all(abs(a[c] - b[c]) <= 0.03 * a[c] for c in AddressClass), (a, b)

def test_tied_head_reads_the_whole_embedding(tiny):
    config = json.loads((tiny / 'config.json').read_text())
    g = {x.name: x for x in config_groups({**config, 'tie_word_embeddings': True})}
    assert g['embed'].cls == A0 and g['embed'].per_token == 72
    assert g['head'].cls == A3 and g['head'].per_token == g['embed'].nbytes + g['head'].nbytes

def test_qwen3_30b_a3b_from_its_config():
    groups = config_groups(QWEN3_30B_A3B)
    stored = sum(g.nbytes for g in groups)
    assert 16e9 <= stored <= 17.5e9, stored  # mlx-lm's 4-bit conversion is about 17.2 GB
    by = bytes_by_class(groups)
    assert by[A1] == 0 and by[A2] == 48 * 128 * 3 * 768 * 2048 * (4 / 8 + 4 / 64) * 8 / 128
    spec = spec_for(QWEN3_30B_A3B)
    pred = bytes_by_class(config_groups(QWEN3_30B_A3B, 4, predicted=predicted_layers(spec, spec.moe_layers[1:-1])))
    assert pred[A1] == pytest.approx(46 / 48 * by[A2] / 2) and pred[A3] == by[A3]

def test_classes_refuse_bad_input(tiny):
    spec = model_spec(tiny)
    with pytest.raises(InputError, match='k 65: expected a whole number of experts from 1 to 64'):
        checkpoint_groups(tiny, 65)
    with pytest.raises(InputError, match='predicted layer 9 is not an MoE layer'):
        checkpoint_groups(tiny, predicted=(9,))
    with pytest.raises(InputError, match='owner layer 5'):
        predicted_layers(spec, [5])
    with pytest.raises(InputError, match='token table model.embed_tokens.*row count is not given'):
        weight_groups(spec, {n: t.nbytes for n, t in index_checkpoint(tiny).items()})
    with pytest.raises(InputError, match="model_type 'llama' is not a supported MoE"):
        config_groups({**QWEN3_30B_A3B, 'model_type': 'llama'})

# --- Theorem 1

def test_hand_built_cases():
    assert all_three([Job('a', 0, 5, 3)]) == (-2, -2, -2)  # one job
    disjoint = [Job('a', 0, 3, 2), Job('b', 5, 8, 4)]
    assert all_three(disjoint) == (1, 1, 1) and deficits(disjoint, 1)[0][1:] == (5, 8, ('b',))
    two = [Job('a', 0, 4, 3), Job('b', 0, 4, 4)]  # one window, 3 units short
    assert all_three(two) == (3, 3, 3) and exposed_latency(two, 1) == 3 and not feasible(two, 1)
    late = [Job('a', 0, 10, 6), Job('b', 2, 4, 2)]  # b must preempt a
    assert edf(late, 1)['segments'] == [('a', 0, 2), ('b', 2, 4), ('a', 4, 8)]
    assert all_three(late) == (0, 0, 0) and feasible(late, 1)
    zero = [Job('a', 0, 6, 6), Job('z', 3, 3, 0)]  # no bytes: done at its release, interrupts nothing
    s = edf(zero, 1)
    assert s['segments'] == [('a', 0, 6)] and s['jobs']['z']['finish'] == 3 and exposed_latency(zero, 1) == 0
    same = [Job('a', 0, 5, 2), Job('b', 1, 5, 2), Job('c', 2, 5, 2)]  # equal deadlines
    assert all_three(same) == (1, 1, 1) and deficits(same, 1)[0] == (1.0, 0, 5, ('a', 'b', 'c'))

def test_real_units():
    job = [Job('layer7', 0.0, 1e-3, 3e6)]
    assert exposed_latency(job, 2e9) == pytest.approx(0.5e-3) and edf(job, 2e9)['max_lateness'] == pytest.approx(0.5e-3)
    a1 = [Job('layer1', -2.6e-3, 1.4e-3, 1.8e6), Job('layer2', -1.6e-3, 2.4e-3, 1.8e6)]
    assert feasible(a1, 1e9)
    assert exposed_latency(a1 + [Job('layer0', 0.4e-3, 0.4e-3, 1.8e6)], 1e9) == pytest.approx(1.8e-3)

def test_theorem_agrees_with_edf_and_exhaustive_search():
    rng, exposed = random.Random(1), 0
    for _ in range(250):
        n = rng.randint(1, 4)
        rel = [rng.randint(0, 8) for _ in range(n)]
        jobs = [Job(f"j{i}", r, rng.randint(r, 12), rng.randint(0, 4)) for i, r in enumerate(rel)]
        worst, deficit, best = all_three(jobs)
        assert worst == deficit == best, jobs
        assert max(worst, 0) == exposed_latency(jobs, 1) == max(best, 0)
        assert feasible(jobs, 1) == (exposed_latency(jobs, 1) == 0)
        exposed += exposed_latency(jobs, 1) > 0
    assert 50 < exposed < 200  # both outcomes are well represented

def test_edf_at_scale_is_consistent():
    "Many float jobs: EDF's lateness is the theorem's, segments never overlap, every byte is moved"
    rng = random.Random(2)
    jobs = []
    for i in range(60):
        r = rng.uniform(0, 0.05)
        jobs.append(Job(f"j{i}", r, r + rng.uniform(0, 0.02), rng.uniform(0, 2e6)))
    s = edf(jobs, 1e9)
    assert s['max_lateness'] == pytest.approx(deficits(jobs, 1e9)[0][0], abs=1e-12)
    segs = sorted(s['segments'], key=lambda x: x[1])
    assert all(a[2] <= b[1] + 1e-15 for a, b in zip(segs, segs[1:]))
    moved = {}
    for name, a, b in segs: moved[name] = moved.get(name, 0) + (b - a) * 1e9
    assert all(moved.get(j.name, 0) == pytest.approx(j.nbytes, abs=1e-3) for j in jobs)

def test_theorem_refuses_bad_input():
    with pytest.raises(InputError, match="job 'layer3': nbytes -5, expected bytes >= 0"):
        Job('layer3', 0, 1, -5)
    with pytest.raises(InputError, match="job 'layer3': deadline 1.5 is before its release 2.0"):
        Job('layer3', 2.0, 1.5, 10)
    for bad in (0, -1e9, math.nan, math.inf, '1e9'):
        for f in (deficits, exposed_latency, feasible, edf):
            with pytest.raises(InputError, match='bandwidth .*: expected a positive number of bytes per second'):
                f([Job('a', 0, 1, 1)], bad)
    with pytest.raises(InputError, match="job name 'a' appears twice"):
        edf([Job('a', 0, 1, 1), Job('a', 0, 2, 1)], 1)
    with pytest.raises(InputError, match='2 lengths, 1 releases'):
        brute_force_lateness([1, 2], [0], [3, 3])

def test_gantt_draws_a_schedule():
    import matplotlib
    matplotlib.use('Agg')
    s = edf([Job('a', 0, 10, 6), Job('b', 2, 4, 2), Job('c', 3, 6, 3)], 1)
    ax = gantt(s, scale=1, unit='units')
    assert [t.get_text() for t in ax.get_yticklabels()] == ['a', 'b', 'c']
    assert 'max lateness 1 units' in ax.get_title()
