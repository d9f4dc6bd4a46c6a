"Prompt caches on disk (edge0.prompt_cache): a restarted session continues every cache kind as the live one does; bad files are passed over; the writes happen off the request's path, and a chat keeps one conversation on disk"
import errno, json, logging, os, subprocess, sys, threading, urllib.request
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
    first prompt's file on disk (the second's replaced it: it is put back), the second from it: live text, restored
    text, tokens reused, the first prompt's ids and the cache kinds that served"""
    with Session(model, prompt_cache=64 * MiB, **kw) as a:
        a.generate(FIRST, 1)  # the cache holds the first prompt exactly
        prefilled, first = snapshot(_live(a)), a.prompt_ids(FIRST)
        a.disk.flush()
        (kept,) = home.rglob('*.safetensors')
        caches, tokens, _ = read_cache(kept)
        assert tokens == first
        _same_arrays(caches, prefilled)  # written and read back exactly
        data = kept.read_bytes()
        live, second = a.generate(SECOND, 12), a.prompt_ids(SECOND)
        assert second[:len(first)] == first
    (replaced,) = home.rglob('*.safetensors')  # the second prompt continues the first: its file alone
    assert read_cache(replaced)[1] == second
    replaced.unlink()
    kept.write_bytes(data)
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
        s.disk.flush()
        (one,) = home.rglob('*.safetensors')
        s.disk.limit = 2 * one.stat().st_size + one.stat().st_size // 2  # two files fit
        s.generate(prompts[1], 1)
        s.disk.flush()
        s.reset()
        s.generate(prompts[0], 1)  # read from disk (and not written again): the most recently used
        assert s.last['reused_tokens'] == len(s.prompt_ids(prompts[0])) - 1
        s.generate(prompts[2], 1)  # three files do not fit: the least recently used goes
        s.disk.flush()
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
        a.disk.flush()
        shared = next(i for i, (x, y) in enumerate(zip(*two)) if x != y)
        assert sorted(len(t) for t in a.disk.index.values()) == sorted([shared, len(two[0]), len(two[1])])
        assert a.last['reused_tokens'] == 0  # the two parts were one prefill
        whole = a.generate(ask('Who built the tower?'), 12, keep=False)
    with Session(model, prompt_cache=64 * MiB, **kw) as b:
        assert b.generate(ask('Who built the tower?'), 12) == whole and b.last['reused_tokens'] == shared

@pytest.fixture
def held(monkeypatch):
    "Prompt cache writes held back until `go` is set; `events` records what happened in which order"
    import mlx_lm.models.cache as mc
    real, go, events = mc.save_prompt_cache, threading.Event(), []
    def save(path, caches, meta):
        go.wait(120)  # a reply that waited for its write would come only after 'written'
        real(path, caches, meta)
        events.append('written')
    monkeypatch.setattr(mc, 'save_prompt_cache', save)
    yield go, events
    go.set()

def _ask_stream(url:str, messages:list) -> str:
    "The text of a streamed answer, read up to its `[DONE]`"
    body = json.dumps(dict(messages=messages, max_tokens=8, temperature=0, stream=True)).encode()
    req = urllib.request.Request(f"{url}/v1/chat/completions", body, {'Content-Type': 'application/json'})
    text = ''
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            line = line.decode().strip()
            if line == 'data: [DONE]': return text
            if line.startswith('data: ') and json.loads(line[6:]).get('choices'):
                text += json.loads(line[6:])['choices'][0]['delta'].get('content') or ''
    raise AssertionError('the stream ended without [DONE]')

def test_the_reply_does_not_wait_for_the_write(home, held):
    "A server's answer and a stream's [DONE] come while their prompts' caches are held back from the disk"
    from edge0.openai_api import serve_in_background
    go, events = held
    with serve_in_background('edge0-tiny', prompt_cache=64 * MiB) as s:
        first = _ask(s.url, FIRST)
        events.append('answer')
        second = _ask_stream(s.url, SECOND)
        events.append('[DONE]')
        assert events == ['answer', '[DONE]'] and not list(home.rglob('[!.]*.safetensors'))
        go.set()
    assert events == ['answer', '[DONE]', 'written', 'written']  # the server's close waits for them
    with serve_in_background('edge0-tiny', prompt_cache=64 * MiB) as s:  # restarted: from disk
        assert _ask(s.url, FIRST) == first and _ask_stream(s.url, SECOND) == second
        session = s.worker.session
        assert session.last['reused_tokens'] == len(session.prompt_ids(SECOND)) - 1

def test_a_prefix_being_written_is_served_from_memory(home, held):
    "Another session asking for a prefix whose file is not written yet is given a copy of it, never a half file"
    go, events = held
    a, b = Session('edge0-tiny', prompt_cache=64 * MiB), Session('edge0-tiny', prompt_cache=64 * MiB)
    try:
        want = a.generate(FIRST, 8)
        assert b.generate(FIRST, 8) == want and b.last['reused_tokens'] == len(b.prompt_ids(FIRST)) - 1
        assert events == [] and not list(home.rglob('[!.]*.safetensors'))  # a copy in memory served it
        assert a.generate(FIRST, 8) == want  # a's own cache, which the copy did not change
    finally:
        go.set()
        a.close()
        b.close()
    assert events == ['written'] and len(list(home.rglob('*.safetensors'))) == 1
    with Session('edge0-tiny', prompt_cache=64 * MiB) as c:  # the file: the snapshot as taken, b's decoding aside
        assert c.generate(FIRST, 8) == want and c.last['reused_tokens'] == len(c.prompt_ids(FIRST)) - 1

def _python(code:str, *args, home:Path, **kw):
    "Run `code` in a new Python process that imports this edge0 and keeps its prompt caches in `home`"
    import edge0
    env = dict(os.environ, EDGE0_HOME=str(home),
               PYTHONPATH=os.pathsep.join([str(Path(edge0.__file__).parents[1]), os.environ.get('PYTHONPATH', '')]))
    return subprocess.Popen([sys.executable, '-c', code, *args], env=env, stdout=subprocess.PIPE, **kw)

KILLED = """
import json, sys, time
from pathlib import Path
import mlx_lm.models.cache as mc
from edge0.memory import MiB
from edge0.session import Session
def half(path, caches, meta):
    Path(path).write_bytes(b'half a file')
    print('writing', flush=True)
    time.sleep(600)  # killed here
mc.save_prompt_cache = half
with Session('edge0-tiny', prompt_cache=64 * MiB) as s: s.generate(json.loads(sys.argv[1]), 4)
"""

def test_an_interrupted_write_leaves_nothing_used(home):
    "A process killed while its prompt cache is half written leaves a temporary that the next session clears, unread"
    p = _python(KILLED, json.dumps(FIRST), home=home)
    try: assert b'writing\n' in iter(p.stdout.readline, b'')
    finally:
        p.kill()
        p.communicate()
    left = [q for q in home.rglob('*') if q.is_file()]
    assert left and all(q.name.startswith('.') and '.tmp-' in q.name for q in left), left
    with Session('edge0-tiny') as fresh: want = fresh.generate(FIRST, 8)
    with Session('edge0-tiny', prompt_cache=64 * MiB) as s:
        assert s.generate(FIRST, 8) == want and s.last['reused_tokens'] == 0
    (kept,) = [q for q in home.rglob('*') if q.is_file()]  # the temporary is gone; the new file whole
    assert not kept.name.startswith('.') and read_cache(kept)[1] == s.prompt_ids(FIRST)

EXITS = """
import json, sys, threading
import mlx_lm.models.cache as mc
from edge0.memory import MiB
from edge0.session import Session
real, go = mc.save_prompt_cache, threading.Event()
def held(path, caches, meta):
    go.wait()
    real(path, caches, meta)
mc.save_prompt_cache = held
s = Session('edge0-tiny', prompt_cache=64 * MiB)  # never closed
print(json.dumps(s.generate(json.loads(sys.argv[1]), 12)), flush=True)
go.set()  # the write goes on as the process exits
"""

def test_an_exiting_process_finishes_its_writes(home):
    "A process that exits with a write under way finishes it first; a restarted session continues with the same tokens"
    p = _python(EXITS, json.dumps(SECOND), home=home)
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0
    live = json.loads(out.splitlines()[-1])
    with Session('edge0-tiny', prompt_cache=64 * MiB) as b:
        assert b.generate(SECOND, 12) == live and b.last['reused_tokens'] == len(b.prompt_ids(SECOND)) - 1

@pytest.mark.parametrize('model', ['edge0-tiny', 'edge0-tiny-q35'])
def test_a_long_chat_keeps_one_conversation_on_disk(home, model):
    """Each turn's prompt replaces the file of the turn before: after six turns the folder holds the last prompt's
    file alone (not every prefix), and a restarted session continues the chat from it"""
    messages, files, sizes = [dict(role='system', content='You answer questions about the old city.')], [], []
    with Session(model, prompt_cache=64 * MiB) as s:
        for q in ('the river', 'the bridge', 'the tower', 'the gate', 'the market', 'the walls'):
            messages.append(dict(role='user', content=f'Tell me about {q}.'))
            messages.append(dict(role='assistant', content=s.generate(messages, 8)))
            s.disk.flush()
            files.append([p for p in home.rglob('*') if p.is_file()])
            sizes.append(sum(p.stat().st_size for p in files[-1]))
        last = s.prompt_ids(messages[:-1])
    assert [len(f) for f in files] == [1] * 6 and read_cache(files[-1][0])[1] == last
    assert sizes == sorted(sizes) and sizes[-1] < sum(sizes) / 3  # one prompt's bytes, not the sum of every turn's
    messages.append(dict(role='user', content='And the harbour?'))
    with Session(model, prompt_cache=64 * MiB) as b:
        restored, reused = b.generate(messages, 8), b.last['reused_tokens']
        assert reused == len(last) and restored == b.generate(messages, 8, keep=False)
