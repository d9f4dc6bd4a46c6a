"""The lm-evaluation-harness model type `edge0` on local tasks (JSONL files and task YAMLs written here: nothing is
downloaded; `datasets` loads local JSON offline), checked against what `Served.logits` and `Served.generate` give."""
import json, math, os, re, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
from edge0.backend import core as B
from edge0.files import InputError, heldout_excerpt
from edge0.lmeval import Edge0LM, generate_text, rolling_pairs, score
from edge0.recovery import log_softmax

MC = [dict(question="The history of the", choices=["city", "banana", "seven"], answer=0),
      dict(question="She walked slowly into the", choices=["room", "of", "blue"], answer=0),
      dict(question="To be, or not to be, that is the", choices=["question", "dog", "river"], answer=0),
      dict(question="It was a truth universally acknowledged, that a single man must be in want of a",
           choices=["wife", "table"], answer=0),
      dict(question="The capital of France is", choices=["Paris", "the"], answer=0),
      dict(question="Two plus two equals", choices=["four", "the"], answer=0)]
GEN = [dict(prompt="The history of the city", target=" of the world"),
       dict(prompt="Elizabeth said to her sister that", target=" she"),
       dict(prompt="The king", target=" of"),
       dict(prompt="In the year", target=" 1900")]
DOCS = [dict(text=t[:t.rfind(' ', 0, 400)]) for t in heldout_excerpt().values()]  # three held-out passages, ~100 tokens
COMMON = dict(dataset_path='json', test_split='test')
TASKS = {
    'edge0_mc': (MC, dict(output_type='multiple_choice', doc_to_text='{{question}}', doc_to_choice='{{choices}}',
                          doc_to_target='{{answer}}', metric_list=[dict(metric='acc')])),
    'edge0_gen': (GEN, dict(output_type='generate_until', doc_to_text='{{prompt}}', doc_to_target='{{target}}',
                            generation_kwargs=dict(until=['\n', '.'], max_gen_toks=6, do_sample=False),
                            metric_list=[dict(metric='exact_match')])),
    'edge0_ppl': (DOCS, dict(output_type='loglikelihood_rolling', doc_to_text='', doc_to_target='{{text}}',
                             metric_list=[dict(metric=m) for m in ('word_perplexity', 'byte_perplexity')]))}
ARGS = 'model=edge0-tiny,mode=routing,k=4'

@pytest.fixture(scope='module')
def tasks(tmp_path_factory) -> Path:
    "A folder of task YAMLs over local JSONL files (JSON is YAML); the datasets cache stays in it"
    d = tmp_path_factory.mktemp('tasks')
    for name, (docs, cfg) in TASKS.items():
        (d / f'{name}.jsonl').write_text(''.join(json.dumps(doc) + '\n' for doc in docs))
        files = dict(data_files=dict(test=str(d / f'{name}.jsonl')), cache_dir=str(d / 'hf-datasets'))
        (d / f'{name}.yaml').write_text(json.dumps(dict(task=name, **COMMON, dataset_kwargs=files, **cfg)))
    return d

@pytest.fixture(scope='module')
def lm() -> Edge0LM:
    return Edge0LM('edge0-tiny', 'routing', 4, batch_size=4)

def direct(served, ctx:list, cont:list) -> tuple:
    "`(logprob, greedy)` of `cont` after `ctx` from `Served.logits` of the one sequence, the context as the prompt"
    lp = np.array(log_softmax(served.logits(np.array([ctx + cont[:-1]]), prefill=len(ctx)).astype(B.float32)))[0]
    span = lp[len(ctx) - 1:]
    return float(span[np.arange(len(cont)), cont].sum()), bool((span.argmax(-1) == cont).all())

def split(tok, ctx:str, cont:str) -> tuple:
    "Context and continuation ids as the harness's HF model splits them: the pair encoded whole, cut at the context"
    c, whole = tok.encode(ctx, add_special_tokens=False), tok.encode(ctx + cont, add_special_tokens=False)
    return c, whole[len(c):]

def test_loglikelihood_is_the_sum_of_log_softmax_of_served_logits(lm):
    from lm_eval.api.instance import Instance
    tok, served = lm.tokenizer, lm.served
    ctx = "The history of the"
    c = tok.encode(ctx)
    best = int(np.array(served.logits(np.array([c]), prefill=len(c)))[0, -1].argmax())
    greedy_text = tok.decode([best])
    assert split(tok, ctx, greedy_text)[1] == [best]  # the greedy token survives the round trip through text
    pairs = [(ctx, greedy_text), (ctx, " banana of the king"), ("", "The king")]
    got = lm.loglikelihood([Instance('loglikelihood', {}, p, i) for i, p in enumerate(pairs)])
    want = [direct(served, *split(tok, *p)) for p in pairs[:2]]
    want.append(direct(served, [lm.prefix_token_id], tok.encode("The king")))  # an empty context: the prefix token
    for (ll, greedy), (ll0, greedy0) in zip(got, want):
        assert math.isclose(ll, ll0, rel_tol=1e-4, abs_tol=1e-3) and greedy == greedy0
    assert got[0][1] and not got[1][1] and got[1][0] < got[0][0] < 0

def test_batched_scoring_matches_one_request_at_a_time(lm):
    "Rows of different lengths and prompt lengths, right-padded in batches, score as they do alone"
    ids = lm.tok_encode(" ".join(d['text'] for d in DOCS))
    pairs = [(ids[:p], ids[p:p + n]) for p, n in ((1, 5), (3, 9), (3, 2), (7, 1), (7, 12), (20, 3), (3, 9))]
    one = score(lm.served, pairs, 4096, batch=1)
    for ll, ll0 in zip(score(lm.served, pairs, 4096, batch=8), one): assert math.isclose(ll[0], ll0[0], abs_tol=2e-3)
    assert [g for _, g in score(lm.served, pairs, 4096, batch=8)] == [g for _, g in one]
    assert np.allclose([ll for ll, _ in one], [direct(lm.served, list(c), list(x))[0] for c, x in pairs], atol=2e-3)

def test_rolling_loglikelihood_predicts_every_token_once(lm):
    from lm_eval.api.instance import Instance
    text = DOCS[0]['text']
    ids = lm.tok_encode(text)
    windows = rolling_pairs(ids, lm.prefix_token_id, 16)
    assert len(ids) > 80 and len(windows) == math.ceil(len(ids) / 16)
    assert sum((x for _, x in windows), []) == ids and all(len(c) + len(x) <= 17 for c, x in windows)
    whole = lm.loglikelihood_rolling([Instance('loglikelihood_rolling', {}, (text,), 0)])[0]
    one_window = direct(lm.served, [lm.prefix_token_id], ids)[0]  # the prefix token is the prompt
    assert math.isclose(whole, one_window, rel_tol=1e-4)
    lm.max_length = 16
    try: short = lm.loglikelihood_rolling([Instance('loglikelihood_rolling', {}, (text,), 0)])[0]
    finally: lm.max_length = 4096
    assert math.isclose(short, sum(direct(lm.served, c, x)[0] for c, x in windows), rel_tol=1e-4)
    assert short < whole  # 16 tokens of context know less than the whole document

def test_generation_stops_and_refuses_what_cannot_fit(lm):
    served, prompt = lm.served, lm.tok_encode("The history of the city")
    sample = served.tokenizer.decode(served.generate(prompt, 12))
    stop = sample[len(sample) // 2:][:2]
    cut = generate_text(served, prompt, dict(until=[stop], max_gen_toks=12), 4096)
    assert cut == sample.split(stop)[0] and len(cut) < len(sample)
    with pytest.raises(InputError, match='max_gen_toks=16 leaves no room'):
        generate_text(served, prompt, dict(until=[], max_gen_toks=16), 16)
    with pytest.warns(UserWarning, match='does not serve typical_p'):
        generate_text(served, prompt, dict(until=[], max_gen_toks=2, do_sample=True, temperature=1.0, typical_p=0.9), 64)
    greedy = generate_text(served, prompt, dict(until=[], max_gen_toks=8), 64)
    hot = dict(until=[], max_gen_toks=8, do_sample=True, temperature=2.0, top_p=0.9, top_k=1)
    assert generate_text(served, prompt, hot, 64) == greedy  # top_k=1 is greedy: the sampler's settings are served
    seeded = dict(until=[], max_gen_toks=8, do_sample=True, temperature=1.0, seed=5)
    assert generate_text(served, prompt, seeded, 64) == generate_text(served, prompt, seeded, 64)
    with pytest.raises(InputError, match="'prefetch'"): Edge0LM('edge0-tiny', 'prefetch')
    with pytest.raises(InputError, match='model_args pool: not an argument'): Edge0LM('edge0-tiny', pool=4)

def test_model_args_pass_one_serving():
    "model_args become one Serving, passed whole; the older spellings still work, with a note"
    with pytest.warns(FutureWarning, match='pool_mb= is now pool_mib='):
        lm = Edge0LM('edge0-tiny', 'routing', 4, pool_mb=64)
    s = lm.served.serving
    assert (s.mode, s.k, s.resident, s.options.pool_bytes) == ('routing', 4, False, 64 * 2**20)
    lm.served.close()

def test_simple_evaluate_on_local_tasks_matches_served(tasks, lm):
    "The harness runs all three kinds of task offline; its numbers are the ones Served gives for its own requests"
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    tm = TaskManager(include_path=str(tasks))
    out = simple_evaluate(model='edge0', model_args=ARGS, tasks=list(TASKS), task_manager=tm, batch_size=4,
                          bootstrap_iters=0, log_samples=True)
    res, tok, served = out['results'], lm.tokenizer, lm.served
    samples = {t: sorted(out['samples'][t], key=lambda s: s['doc_id']) for t in TASKS}
    lls = [[direct(served, *split(tok, ctx, cont))[0] for ctx, cont in s['arguments']] for s in samples['edge0_mc']]
    acc = np.mean([np.argmax(ll) == doc['answer'] for ll, doc in zip(lls, MC)])
    assert 0 < acc < 1 and math.isclose(res['edge0_mc']['acc,none'], acc)
    prompts = [tok.encode(s['arguments'][0][0]) for s in samples['edge0_gen']]
    texts = [tok.decode(served.generate(p, 6, until=['\n', '.'])).split('\n')[0].split('.')[0] for p in prompts]
    assert texts == [s['resps'][0][0] for s in samples['edge0_gen']]
    assert math.isclose(res['edge0_gen']['exact_match,none'], np.mean([t == g['target'] for t, g in zip(texts, GEN)]))
    total = sum(direct(served, [lm.prefix_token_id], tok.encode(d['text']))[0] for d in DOCS)
    words = sum(len(re.split(r'\s+', d['text'])) for d in DOCS)  # the harness's word count
    ppl = res['edge0_ppl']['word_perplexity,none']
    assert math.isfinite(ppl) and math.isclose(ppl, math.exp(-total / words), rel_tol=1e-3)

def test_command_line_runs_a_local_task(tasks, tmp_path, lm):
    env = dict(os.environ, HF_DATASETS_OFFLINE='1', HF_HUB_OFFLINE='1', HF_HOME=str(tmp_path / 'hf'))
    cmd = ['--model', 'edge0', '--model_args', ARGS, '--tasks', 'edge0_mc', '--include_path', str(tasks),
           '--limit', '2', '--output_path', str(tmp_path / 'out')]
    r = subprocess.run([sys.executable, '-m', 'edge0.lmeval', *cmd], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'edge0_mc' in r.stdout and 'acc' in r.stdout
    results = json.loads(next((tmp_path / 'out').rglob('results_*.json')).read_text())['results']['edge0_mc']
    want = [np.argmax([direct(lm.served, *split(lm.tokenizer, d['question'], ' ' + c))[0] for c in d['choices']])
            == d['answer'] for d in MC[:2]]
    assert math.isclose(results['acc,none'], np.mean(want))
