"Prompt caches on disk (edge0.prompt_cache): a restarted session continues every cache kind as the live one does; bad files are passed over"
import errno, json, logging, urllib.request
from pathlib import Path
import pytest
from edge0.backend import core as B
from edge0.memory import MiB
from edge0.prompt_cache import read_cache, saveable, snapshot
from edge0.session import Session

FIRST = [dict(role='system', content='You answer questions about the old city. ' * 4),
         dict(role='user', content='Tell me about the river.')]
SECOND = FIRST + [dict(role='assistant', content='It is wide.'), dict(role='user', content='And the bridge?')]

@pytest.fixture
def home(tmp_path, monkeypatch):
    "A fresh $EDGE0_HOME: the prompt caches of one test"
    monkeypatch.setenv('EDGE0_HOME', str(tmp_path / 'home'))
    return tmp_path / 'home'

@pytest.fixture(scope='module')
def q35_torch(tmp_path_factory):
    "The bundled Qwen3.5 hybrid converted for the torch step (its linear attention: the step's `Recurrent`)"
    from edge0.convert import convert
    from edge0.files import teacher_path
    return convert(teacher_path('edge0-tiny-q35'), tmp_path_factory.mktemp('q35') / 'q35-torch', layout='torch-cpu')

def _live(s:Session) -> list: return s.cache if s.step is None else s.step.caches

def _same_arrays(a:list, b:list):
    fa, fb = (B.tree_flatten([saveable(c).state for c in cs]) for cs in (a, b))
    assert [n for n, _ in fa] == [n for n, _ in fb]
    for (n, x), (_, y) in zip(fa, fb):
        assert ((B.to_numpy(x) == B.to_numpy(y)).all() if isinstance(x, B.array) else x == y), n

def _restart(model, home:Path, **kw):
    """The first prompt prefilled and stored, the second generated from the live cache; then, restarted with only the
    first prompt's file on disk, the second from it: live text, restored text, tokens reused, the first prompt's ids
    and the cache kinds that served"""
    with Session(model, prompt_cache=64 * MiB, **kw) as a:
        a.generate(FIRST, 1)  # the cache holds the first prompt exactly
        prefilled = snapshot(_live(a))
        live, first = a.generate(SECOND, 12), a.prompt_ids(FIRST)
        assert a.prompt_ids(SECOND)[:len(first)] == first
    files = {p: read_cache(p) for p in home.rglob('*.safetensors')}
    kept = [p for p, (_, tokens, _) in files.items() if tokens == first]
    assert len(kept) == 1, files.keys()
    _same_arrays(files[kept[0]][0], prefilled)  # written and read back exactly
    for p in files:
        if p not in kept: p.unlink()
    with Session(model, prompt_cache=64 * MiB, **kw) as b:
        restored = b.generate(SECOND, 12)
        return live, restored, b.last['reused_tokens'], first, {type(c).__name__ for c in _live(b)}

@pytest.mark.parametrize('model,kw,kind', [
    ('edge0-tiny', {}, 'KVCache'),
    ('edge0-tiny-q35', {}, 'ArraysCache'),
    ('edge0-tiny-ds', {}, 'KVCache'),  # latent attention: mlx-lm keeps the latents in a KVCache
    ('edge0-tiny', dict(max_kv_size=24), 'RotatingKVCache'),  # wrapped: the prompt is longer
    ('edge0-tiny', dict(mode='routing', k=4), 'KVCache'),  # a prerouted decoder: its plan starts afresh
])
def test_restart_continues_each_mlx_cache_kind(home, model, kw, kind):
    live, restored, reused, first, kinds = _restart(model, home, **kw)
    assert restored == live and reused == len(first) and kind in kinds

@pytest.mark.parametrize('which,kinds', [('tiny', {'KV'}), ('q35', {'KV', 'Recurrent'})])
def test_restart_continues_the_torch_step(home, tiny_torch, q35_torch, which, kinds):
    live, restored, reused, first, used = _restart(tiny_torch if which == 'tiny' else q35_torch, home)
    assert restored == live and reused == len(first) and used == kinds  # the step's own caches

def _notes(caplog) -> list: return [r.getMessage() for r in caplog.records if r.name == 'edge0']

def test_changed_cut_or_foreign_files_are_passed_over(home, caplog):
    "A file changed on disk, cut short, or from another configuration is not used: a note, and the prompt prefilled"
    with Session('edge0-tiny', prompt_cache=64 * MiB) as a: want = a.generate(FIRST, 8)
    (stored,) = home.rglob('*.safetensors')
    data = stored.read_bytes()
    with Session('edge0-tiny', k=4, prompt_cache=64 * MiB) as other:
        other.generate(FIRST, 8)  # K=4: another configuration, another folder
    foreign = next(p for p in home.rglob('*.safetensors') if p.parent != stored.parent)
    for bad, why in ((data[:-9] + bytes([data[-9] ^ 1]) + data[-8:], 'the checksum does not match'),
                     (data[:len(data) // 2], 'not a whole prompt cache'),
                     (foreign.read_bytes(), 'made under another configuration: mode')):
        stored.write_bytes(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger='edge0'), Session('edge0-tiny', prompt_cache=64 * MiB) as b:
            assert b.generate(FIRST, 8) == want and b.last['reused_tokens'] == 0
        assert any(why in n for n in _notes(caplog)), _notes(caplog)

def test_the_bound_keeps_the_most_recently_used(home):
    prompts = [[dict(role='user', content=f'Tell me about the {w}.')] for w in ('river', 'bridge', 'tower')]
    with Session('edge0-tiny', prompt_cache=64 * MiB) as s:
        s.generate(prompts[0], 1)
        (one,) = home.rglob('*.safetensors')
        s.disk.limit = 2 * one.stat().st_size + one.stat().st_size // 2  # two files fit
        s.generate(prompts[1], 1)
        s.reset()
        s.generate(prompts[0], 1)  # read from disk (and not written again): the most recently used
        assert s.last['reused_tokens'] == len(s.prompt_ids(prompts[0])) - 1
        s.generate(prompts[2], 1)  # three files do not fit: the least recently used goes
        kept = sorted(read_cache(p)[1] for p in home.rglob('*.safetensors'))
        assert kept == sorted([s.prompt_ids(prompts[0]), s.prompt_ids(prompts[2])])

def test_a_full_disk_leaves_nothing_and_serving_goes_on(home, caplog, monkeypatch):
    import mlx_lm.models.cache as mc
    def full(path, caches, meta):
        Path(path).write_bytes(b'part of a file')
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(mc, 'save_prompt_cache', full)
    with caplog.at_level(logging.WARNING, logger='edge0'), Session('edge0-tiny', prompt_cache=64 * MiB) as s:
        text = s.generate(FIRST, 8)
    assert text == Session('edge0-tiny').generate(FIRST, 8)
    assert [p for p in home.rglob('*') if p.is_file()] == []
    assert any('No space left on device' in n for n in _notes(caplog)), _notes(caplog)

def test_an_unusable_folder_turns_the_disk_off(home, caplog):
    home.mkdir(parents=True)
    (home / 'prompt-cache').write_text('a file where the folder would be')
    with caplog.at_level(logging.WARNING, logger='edge0'), Session('edge0-tiny', prompt_cache=64 * MiB) as s:
        assert s.disk is None and s.generate(FIRST, 4)
    assert any('prompt caches on disk are off' in n for n in _notes(caplog)), _notes(caplog)

def test_a_trace_turns_the_disk_off(home, tmp_path):
    with Session('edge0-tiny', mode='off', k=4, record_trace=True, prompt_cache=64 * MiB) as s:
        assert s.disk is None and any('a routing trace counts steps' in n for n in s.handle.notes)

def _ask(url:str, messages:list) -> str:
    body = json.dumps(dict(messages=messages, max_tokens=8, temperature=0)).encode()
    req = urllib.request.Request(f"{url}/v1/chat/completions", body, {'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=60) as r: return json.load(r)['choices'][0]['message']['content']

def test_a_restarted_server_answers_from_disk(home):
    from edge0.openai_api import serve_in_background
    with serve_in_background('edge0-tiny', prompt_cache=64 * MiB) as s: first = _ask(s.url, FIRST)
    with serve_in_background('edge0-tiny', prompt_cache=64 * MiB) as s:
        assert _ask(s.url, FIRST) == first
        session = s.worker.session
        assert session.last['reused_tokens'] == len(session.prompt_ids(FIRST)) - 1

@pytest.mark.parametrize('which', ['graph', 'torch'])
def test_a_named_file_round_trips_and_a_bad_one_is_refused(tmp_path, tiny_torch, monkeypatch, which):
    "cache-prompt's file continues as the live cache does, for the MLX graph and the torch step; a full disk leaves nothing"
    from edge0.files import InputError
    model, f = ('edge0-tiny' if which == 'graph' else tiny_torch), tmp_path / 'p.safetensors'
    with Session(model) as a:
        head, more = a.cached_prompt_ids('The history of the city is long. Tell me about'), a.continued_ids(' the river.')
        a.cache_prompt(head, f)
        live = ''.join(p.text for p in a.stream(head + more, 12))
    with Session(model) as b:
        assert (b.step is not None) == (which == 'torch')
        assert ''.join(p.text for p in b.stream(b.use_prompt_file(f, more), 12)) == live
        assert b.last['reused_tokens'] == len(head)
        with pytest.raises(InputError, match='does not exist'): b.use_prompt_file(tmp_path / 'none.safetensors', more)
        import mlx_lm.models.cache as mc
        def full(path, caches, meta):
            Path(path).write_bytes(b'part of a file')
            raise OSError(errno.ENOSPC, 'No space left on device')
        monkeypatch.setattr(mc, 'save_prompt_cache', full)
        with pytest.raises(InputError, match=r'cannot write .*q\.safetensors: No space left on device'):
            b.cache_prompt(head, tmp_path / 'q.safetensors')
    assert sorted(p.name for p in tmp_path.iterdir()) == ['p.safetensors']

@pytest.mark.parametrize('which,kw', [('q35', {}), ('q35-torch', {}), ('tiny', dict(max_kv_size=24))])
def test_a_shared_system_prompt_is_stored_where_prompts_part(home, q35_torch, which, kw):
    """A cache that cannot be cut back (linear attention, the torch step's Recurrent, a wrapped rotating cache): the
    second question after one system prompt stores the prefix the two share, which a restarted session then reads for
    a third question, with the text of a whole prefill"""
    model = dict(q35='edge0-tiny-q35', tiny='edge0-tiny').get(which, q35_torch)
    system = dict(role='system', content='You answer questions about the old city. ' * 4)
    ask = lambda q: [system, dict(role='user', content=q)]
    with Session(model, prompt_cache=64 * MiB, **kw) as a:
        a.generate(ask('Tell me about the river.'), 4)
        a.generate(ask('Where is the bridge?'), 4)
        two = [a.prompt_ids(ask(q)) for q in ('Tell me about the river.', 'Where is the bridge?')]
        shared = next(i for i, (x, y) in enumerate(zip(*two)) if x != y)
        assert sorted(len(t) for t in a.disk.index.values()) == sorted([shared, len(two[0]), len(two[1])])
        assert a.last['reused_tokens'] == 0  # the two parts were one prefill
        whole = a.generate(ask('Who built the tower?'), 12, keep=False)
    with Session(model, prompt_cache=64 * MiB, **kw) as b:
        assert b.generate(ask('Who built the tower?'), 12) == whole and b.last['reused_tokens'] == shared
