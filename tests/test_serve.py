"""`edge0 serve` over real HTTP, driven by OpenAI's own client: whole and streamed answers equal to the session's,
usage counts, FIFO order, a full queue, bad requests, a path as the model, an internal error and a client that
hangs up. One server over the streamed bundled model serves most of the file. Under load and faults (issue 26): a
burst of 8 clients x 50 requests (on the resident model, for time), 20 clients hanging up midway among others,
a server killed mid-stream and started again on its port, and what the openai client can send past the limits."""
import concurrent.futures, contextlib, http.client, json, logging, random, socket, sys, threading, time
import urllib.error, urllib.request
from pathlib import Path
import pytest
import openai
from edge0.openai_api import Job, serve_in_background
from edge0.session import Piece, Session

MODEL, RIVER, CITY = 'edge0-tiny', [dict(role='user', content='Tell me about the river.')], 'The history of the city'
MAX_QUEUE, LIMIT, BODY = 3, 256, 2**16

@pytest.fixture(scope='module')
def expected():
    "The session's own greedy texts, made in this process before any server runs"
    with Session(MODEL) as s:
        return dict(chat=s.generate(RIVER, 8), text=s.generate(CITY, 8, chat=False), chat_ids=len(s.prompt_ids(RIVER)),
                    text_ids=len(s.prompt_ids(CITY, chat=False)), eos=sorted(s.eos))

@pytest.fixture(scope='module')
def srv(expected):
    with serve_in_background(MODEL, max_queue=MAX_QUEUE, max_tokens_limit=LIMIT, max_body_bytes=BODY) as s: yield s

def client(srv): return openai.OpenAI(base_url=f"{srv.url}/v1", api_key='none', max_retries=0, timeout=60)

def call(srv, path, body=None, method=None) -> tuple:
    "(status, JSON body, headers) of one plain HTTP request"
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(srv.url + path, data, {'Content-Type': 'application/json'}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r: return r.status, json.load(r), r.headers
    except urllib.error.HTTPError as e: return e.code, json.load(e), e.headers

def chat(srv, **kw):
    return client(srv).chat.completions.create(**dict(model=MODEL, messages=RIVER, max_tokens=8, temperature=0) | kw)

def wait_for(cond, what, timeout=60):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, f"waited {timeout} s for {what}"
        time.sleep(0.02)

def endless(expected) -> dict:
    "A logit bias without an end of sequence: the text runs to max_tokens unless cancelled"
    return {str(t): -100 for t in expected['eos']}

def finished(srv, seq, status) -> bool: return any(j.seq == seq and j.status == status for j in list(srv.worker.recent))

@contextlib.contextmanager
def holding(srv, expected):
    "A long streamed completion that keeps the worker busy until the block ends, then hangs up"
    seq = srv.worker.arrivals
    stream = client(srv).completions.create(model=MODEL, prompt=CITY, max_tokens=LIMIT, temperature=0, stream=True,
                                            logit_bias=endless(expected))
    next(iter(stream))  # it is being served now
    try: yield seq
    finally:
        stream.close()
        wait_for(lambda: finished(srv, seq, 499), 'the held stream to stop')

def test_chat_whole_and_streamed_is_the_sessions_text(srv, expected):
    a, b = chat(srv), chat(srv)
    assert a.choices[0].message.content == b.choices[0].message.content == expected['chat']
    assert (a.object, a.model, a.choices[0].message.role, a.choices[0].finish_reason) == \
        ('chat.completion', MODEL, 'assistant', 'length')
    assert (a.usage.prompt_tokens, a.usage.completion_tokens, a.usage.total_tokens) == \
        (expected['chat_ids'], 8, expected['chat_ids'] + 8)
    chunks = list(chat(srv, stream=True, stream_options=dict(include_usage=True)))
    assert {c.object for c in chunks} == {'chat.completion.chunk'} and len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == 'assistant'
    assert ''.join(c.choices[0].delta.content or '' for c in chunks if c.choices) == expected['chat']
    assert chunks[-2].choices[0].finish_reason == 'length' and chunks[-1].choices == []
    assert chunks[-1].usage.model_dump(include={'prompt_tokens', 'completion_tokens', 'total_tokens'}) == \
        a.usage.model_dump(include={'prompt_tokens', 'completion_tokens', 'total_tokens'})
    assert all(c.usage is None for c in chat(srv, stream=True, max_tokens=2))

def test_text_completions_whole_streamed_and_stopped(srv, expected):
    c = client(srv)
    t = c.completions.create(model=MODEL, prompt=CITY, max_tokens=8, temperature=0)
    assert (t.object, t.choices[0].text, t.choices[0].finish_reason) == ('text_completion', expected['text'], 'length')
    assert (t.usage.prompt_tokens, t.usage.completion_tokens) == (expected['text_ids'], 8)
    chunks = list(c.completions.create(model=MODEL, prompt=[CITY], max_tokens=8, temperature=0, stream=True))
    assert ''.join(x.choices[0].text for x in chunks) == expected['text']
    assert {x.object for x in chunks} == {'text_completion'} and chunks[-1].choices[0].finish_reason == 'length'
    cut = expected['text'].split()[2]
    s = c.completions.create(model=MODEL, prompt=CITY, max_tokens=8, temperature=0, stop=[cut])
    assert (s.choices[0].text, s.choices[0].finish_reason) == (expected['text'][:expected['text'].index(cut)], 'stop')

def test_models_and_health(srv):
    c = client(srv)
    assert [m.id for m in c.models.list().data] == [MODEL] and c.models.retrieve(MODEL).owned_by == 'edge0'
    with pytest.raises(openai.NotFoundError, match="serves 'edge0-tiny'") as e: c.models.retrieve('gpt-4o')
    assert e.value.code == 'model_not_found'
    status, body, _ = call(srv, '/health')
    assert status == 200 and body == dict(status='ok', model=MODEL, busy=False, waiting=0)

def test_clients_at_once_are_answered_one_at_a_time_in_arrival_order(srv, expected):
    prompts, answered, lock = [f"Tell me about the {w}." for w in ('river', 'bridge', 'market')], [], threading.Lock()
    def ask(p):
        r = client(srv).chat.completions.create(model=MODEL, messages=[dict(role='user', content=p)], max_tokens=4,
                                                temperature=0)
        with lock: answered.append((p, r.choices[0].finish_reason))
    with holding(srv, expected) as held:  # all three wait in the queue, in the order the server saw them arrive
        threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
        for t in threads: t.start()
        wait_for(lambda: srv.worker.jobs.qsize() == 3, 'three waiting requests')
    for t in threads: t.join()
    jobs = [j for j in srv.worker.recent if j.seq > held]
    assert [j.seq for j in jobs] == sorted(j.seq for j in jobs) and all(j.status == 200 for j in jobs)
    assert all(a.times['finished'] <= b.times['started'] for a, b in zip(jobs, jobs[1:]))  # one at a time
    assert [p for p, _ in answered] == [j.prompt[-1]['content'] for j in jobs]  # answered in the order they arrived
    assert all(r in ('length', 'stop') for _, r in answered)

def test_a_full_queue_is_refused_at_once_with_503(srv, expected):
    results = []
    with holding(srv, expected):
        threads = [threading.Thread(target=lambda: results.append(chat(srv, max_tokens=2))) for _ in range(MAX_QUEUE)]
        for t in threads: t.start()
        wait_for(lambda: srv.worker.jobs.qsize() == MAX_QUEUE, 'a full queue')
        status, body, headers = call(srv, '/v1/chat/completions', dict(model=MODEL, messages=RIVER, max_tokens=2))
        assert status == 503 and body['error']['type'] == 'server_busy' and headers['Retry-After'] == '1'
        assert f"{MAX_QUEUE} requests are waiting" in body['error']['message']
    for t in threads: t.join()
    assert len(results) == MAX_QUEUE and all(r.usage.completion_tokens == 2 for r in results)

def test_a_client_that_hangs_up_stops_its_generation(srv, expected):
    with holding(srv, expected) as held: pass
    job = [j for j in srv.worker.recent if j.seq == held][0]
    consumed = len(srv.worker.session.tokens) - expected['text_ids']  # the cancelled stream was the last one served
    assert job.status == 499 and job.usage is None and consumed < LIMIT // 2
    assert chat(srv).choices[0].message.content == expected['chat']  # the next request, from a consistent cache

def test_a_whole_answer_whose_client_hangs_up_waiting_or_midway_is_dropped(srv, expected):
    def send(prompt):
        conn = http.client.HTTPConnection(srv.url.removeprefix('http://'), timeout=60)
        conn.request('POST', '/v1/completions', json.dumps(dict(prompt=prompt, max_tokens=LIMIT, temperature=0,
                                                                logit_bias=endless(expected))))
        return conn
    with holding(srv, expected):
        left = send('Once upon a time')
        wait_for(lambda: srv.worker.jobs.qsize() == 1, 'a waiting request')
        job = srv.worker.jobs.queue[0]
        left.close()
        wait_for(job.cancel.is_set, 'the waiting request to be cancelled')
    wait_for(lambda: job.status == 499, 'the waiting request to be dropped')
    s = srv.worker.session
    assert job.usage is None and s.tokenizer.decode(s.tokens).startswith(CITY)  # it was never fed to the model
    seq = srv.worker.arrivals
    midway = send(CITY)
    wait_for(lambda: getattr(srv.worker.current, 'seq', None) == seq, 'the request to be served')
    midway.close()
    wait_for(lambda: finished(srv, seq, 499), 'the request to stop')
    assert len(s.tokens) - expected['text_ids'] < LIMIT // 2
    assert chat(srv).choices[0].message.content == expected['chat']

BAD = [  # (path, body, status, in the message, param)
    ('/v1/chat/completions', b'{"messages": [', 400, 'the body is not valid JSON', None),
    ('/v1/chat/completions', b'[1, 2]', 400, 'the body must be a JSON object, got list', None),
    ('/v1/chat/completions', b'{"messages": [], "temperature": NaN}', 400, 'NaN is not a JSON number', None),
    ('/v1/chat/completions', dict(messages=RIVER, foo=1), 400, "Unknown parameter: 'foo'", 'foo'),
    ('/v1/chat/completions', dict(messages=RIVER, adapter='/tmp/lora.safetensors'), 400, 'Unknown parameter',
     'adapter'),
    ('/v1/completions', dict(messages=RIVER), 400, "Unknown parameter: 'messages'", 'messages'),
    ('/v1/chat/completions', dict(messages=RIVER, temperature=5), 400, 'temperature must be in [0, 2], got 5',
     'temperature'),
    ('/v1/chat/completions', dict(messages=RIVER, top_p=0), 400, 'top_p must be in (0, 1], got 0', 'top_p'),
    ('/v1/chat/completions', dict(messages=RIVER, max_tokens='8'), 400, "max_tokens must be an integer, got '8'",
     'max_tokens'),
    ('/v1/chat/completions', dict(messages=RIVER, max_tokens=100000), 400,
     f"max_tokens must be in [1, {LIMIT}] (this server's limit), got 100000", 'max_tokens'),
    ('/v1/chat/completions', dict(messages=RIVER, n=2), 400, 'n 2 is not supported by edge0 serve (only 1)', 'n'),
    ('/v1/chat/completions', dict(messages=RIVER, frequency_penalty=0.5), 400, 'frequency_penalty 0.5 is not supported',
     'frequency_penalty'),
    ('/v1/chat/completions', dict(messages=RIVER, stream_options=dict(include_usage=True)), 400,
     'stream_options is only allowed when stream is true', 'stream_options'),
    ('/v1/chat/completions', dict(messages=[dict(role='wizard', content='x')]), 400, 'message 0 must be', 'messages[0]'),
    ('/v1/chat/completions', dict(messages=RIVER, logit_bias={'99999': 1}), 400,
     'logit_bias token 99999 is not a token id below 8192', None),
    ('/v1/completions', dict(prompt='word ' * 5000, max_tokens=8), 400, "tokens; the model's context is 4096",
     'prompt'),
    ('/v1/completions', dict(prompt='word ' * 4000, max_tokens=200), 400, 'max_tokens asks for 200 more', 'max_tokens'),
    ('/v1/completions', dict(prompt='x' * BODY), 413, f"over this server's limit of {BODY} bytes", None),
    ('/v1/chat/completions', dict(model='gpt-4o', messages=RIVER), 404, "serves 'edge0-tiny'", 'model'),
    ('/v1/nope', dict(messages=RIVER), 404, 'Not Found (POST /v1/nope)', None),
]

def test_bad_requests_get_4xx_naming_the_fault_and_the_server_goes_on(srv, expected):
    for path, body, status, message, param in BAD:
        got, answer, _ = call(srv, path, body)
        assert (got, set(answer['error'])) == (status, {'message', 'type', 'param', 'code'}), (body, answer)
        assert message in answer['error']['message'] and answer['error']['param'] == param, (body, answer)
        assert call(srv, '/health')[0] == 200
    assert call(srv, '/v1/chat/completions', method='GET')[:2] == \
        (405, dict(error=dict(message='Method Not Allowed (GET /v1/chat/completions)', type='invalid_request_error',
                              param=None, code=None)))
    with pytest.raises(openai.BadRequestError, match='temperature must be in'): chat(srv, temperature=3)
    assert chat(srv).choices[0].message.content == expected['chat']

def test_a_path_as_model_is_refused_and_never_read(srv, tmp_path):
    other = tmp_path / 'other-model'
    other.mkdir()
    (other / 'config.json').write_text('{}')
    touched, watching = [], [True]
    def audit(event, args):
        if watching and event in ('open', 'os.listdir', 'os.scandir', 'os.stat') and args and str(args[0]).startswith(
                str(tmp_path)): touched.append((event, args[0]))
    sys.addaudithook(audit)
    try:
        for model in (str(other), str(other / 'config.json'), str(srv.worker.session.model_dir)):
            status, body, _ = call(srv, '/v1/chat/completions', dict(model=model, messages=RIVER, max_tokens=2))
            assert (status, body['error']['code']) == (404, 'model_not_found')
            assert f"The model {model!r} does not exist: this server serves 'edge0-tiny'" in body['error']['message']
        assert touched == []
        (other / 'config.json').read_text()  # what reading it would look like
        assert touched == [('open', str(other / 'config.json'))]
    finally: watching.clear()

def test_an_internal_error_is_a_500_and_the_server_goes_on(srv, expected):
    def boom(*a, **kw): raise RuntimeError('the disk went away')
    srv.worker.session.stream = boom
    try: status, body, _ = call(srv, '/v1/chat/completions', dict(messages=RIVER, max_tokens=2))
    finally: del srv.worker.session.stream
    assert (status, body['error']['type']) == (500, 'server_error')
    assert body['error']['message'] == 'internal error: RuntimeError: the disk went away'
    def midway(*a, **kw):
        yield Piece('The', 1)
        raise RuntimeError('the disk went away')
    srv.worker.session.stream = midway
    try:
        stream = iter(chat(srv, stream=True))
        assert next(stream).choices[0].delta.role == 'assistant' and next(stream).choices[0].delta.content == 'The'
        with pytest.raises(openai.APIError, match='the disk went away'): next(stream)  # an error event after the 200
    finally: del srv.worker.session.stream
    assert chat(srv).choices[0].message.content == expected['chat']

def test_the_edge0_serve_command(expected, tmp_path):
    "`edge0 serve` as a user starts it: on 127.0.0.1, answering the openai client, stopped by SIGTERM; a taken port fails"
    import signal, socket, subprocess
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / 'edge0'
    p = subprocess.Popen([exe, 'serve', '-m', MODEL, '--port', str(port), '--max-queue', '2'], stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, text=True)
    try:
        line = p.stderr.readline()
        assert f"serving {MODEL} at http://127.0.0.1:{port}/v1" in line, line
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key='none', max_retries=0, timeout=60)
        r = c.chat.completions.create(model=MODEL, messages=RIVER, max_tokens=8, temperature=0)
        assert r.choices[0].message.content == expected['chat'] and r.usage.prompt_tokens == expected['chat_ids']
        taken = subprocess.run([exe, 'serve', '-m', MODEL, '--port', str(port)], capture_output=True, text=True,
                               timeout=120)
        assert taken.returncode == 2 and len(taken.stderr.strip().splitlines()) == 1, taken.stderr
        assert str(port) in taken.stderr, taken.stderr
    finally:
        p.send_signal(signal.SIGTERM)  # as a service manager stops it; Ctrl-C takes the same way out
        assert p.wait(timeout=30) == 0
        p.stderr.close()
    bad = subprocess.run([exe, 'serve', '-m', str(tmp_path / 'nothing')], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and 'does not exist' in bad.stderr and len(bad.stderr.strip().splitlines()) == 1

# Load and faults (issue 26). A client that is refused with a 503 retries after RETRY seconds rather than the
# Retry-After second the server suggests: a test's clients are patient but not slow.
RETRY, TRIES = 0.1, 600

def patient(ask, refused:list):
    "`ask()` until it is not refused for a full queue; each refusal is appended to `refused`"
    for _ in range(TRIES):
        try: return ask()
        except openai.InternalServerError as e:
            if (e.status_code, e.code) != (503, 'server_busy'): raise
            refused.append(e.code)  # not the error: it holds the response and its frames
            time.sleep(RETRY)
    raise AssertionError(f"refused {TRIES} times in a row")

def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]

def text_of(stream) -> str:
    "The text of a streamed chat or text completion"
    return ''.join((c.choices[0].delta.content or '') if c.object == 'chat.completion.chunk' else c.choices[0].text
                   for c in stream if c.choices)

def recording(worker) -> list:
    "Jobs' (seq, started, finished, status, seed) appended in the order `worker` serves them, from now on"
    served, serve = [], worker._serve
    def record(job):
        serve(job)
        served.append((job.seq, job.times['started'], job.times['finished'], job.status, job.sampling.seed))
    worker._serve = record  # the worker thread looks the method up per job
    return served

@contextlib.contextmanager
def quiet_log():
    "The server's line per request off: pytest keeps every record of a test in memory, a server writes them out"
    log = logging.getLogger('edge0.serve')
    level = log.level
    log.setLevel(logging.WARNING)
    try: yield
    finally: log.setLevel(level)

CLIENTS, REQUESTS, BURST_TOKENS = 8, 50, 2
# What RSS may grow by over the burst without a leak: glibc's per-thread arenas and pymalloc's arenas keep freed
# memory for reuse, and MLX keeps freed buffers in its cache. Measured +0.6 to +0.7 MiB on 2 cores; 16 MiB is 40 KiB
# a request (keeping each 503's error, response and frames was +34 MiB). A kept job is smaller: counted apart.
RSS_SLACK = 16 * 2**20

def test_a_burst_of_8_clients_x_50_requests_is_served_whole_in_arrival_order_and_memory_comes_back(expected):
    """8 clients send 50 requests each (whole and streamed in turn) to a server with 3 places in its queue; a 503 is
    retried after RETRY seconds and counted. Each request has its own seed, which tags it (greedy decoding does not
    use it, and the prompt, the same for all, is read from the cache).
    Answered: every request gets a 200 with its BURST_TOKENS tokens, all of them the same text, and the worker
    served each request once.
    None lost: `Worker.submit` numbers every arrival (`Job.seq`), refused or not, so the numbers given out during
    the burst are exactly the jobs served plus the 503s counted.
    FIFO: in the order the worker thread served them (recorded as it serves), the jobs' arrival numbers increase
    strictly, and each started after the one before finished. `seq` is given on the event loop's one thread in
    the same step as the job's `put` into the queue, so it is the queue's order.
    Memory: this process (the server's; the clients' threads, connections and caches are made in a warm-up before)
    has its RSS back within RSS_SLACK after the burst, and no job of the burst is alive beyond the worker's window
    of recent ones. The resident model (a token costs about a tenth of the streamed one's here) keeps 400 requests
    within CI's time: what is checked is the server, the same over either."""
    import gc, psutil
    kw = dict(model=MODEL, messages=RIVER, max_tokens=BURST_TOKENS, temperature=0, logit_bias=endless(expected))
    with serve_in_background(MODEL, max_queue=MAX_QUEUE, max_tokens_limit=LIMIT, resident=True, no_adapter=True) as b, \
            concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool, quiet_log():
        clients, refused = [client(b) for _ in range(CLIENTS)], []
        def ask(c:int, i:int) -> tuple:
            oa, seed = clients[c], c * 1000 + i
            if i % 2 == 0:
                r = patient(lambda: oa.chat.completions.create(**kw, seed=seed), refused)
                return seed, r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens
            chunks = list(patient(lambda: oa.chat.completions.create(
                **kw, seed=seed, stream=True, stream_options=dict(include_usage=True)), refused))
            return seed, text_of(chunks), chunks[-2].choices[0].finish_reason, chunks[-1].usage.completion_tokens
        def run(c:int, first:int, n:int): return [ask(c, i) for i in range(first, first + n)]
        def burst(first:int, n:int): return [a for f in [pool.submit(run, c, first, n) for c in range(CLIENTS)]
                                             for a in f.result(timeout=300)]
        burst(REQUESTS, 3)  # warm-up: every thread, client, connection and cache the burst will use exists after it
        proc, loop = psutil.Process(), b.worker.recent[-1].loop
        burst_jobs = lambda: {id(o) for o in gc.get_objects() if type(o) is Job and getattr(o, 'loop', 0) is loop}
        gc.collect()
        rss0, arrived0, refused[:] = proc.memory_info().rss, b.worker.arrivals, []
        served = recording(b.worker)
        answers = burst(0, REQUESTS)
        wait_for(lambda: len(served) == CLIENTS * REQUESTS and not b.worker.busy, 'the worker to finish')
        gc.collect()
        rss1, arrivals = proc.memory_info().rss, b.worker.arrivals - arrived0
        leaked = burst_jobs() - {id(j) for j in b.worker.recent}
    assert len(answers) == CLIENTS * REQUESTS and len({a[1:] for a in answers}) == 1, {a[1:] for a in answers}
    assert answers[0][2:] == ('length', BURST_TOKENS)
    assert sorted(a[0] for a in answers) == sorted(s[4] for s in served)  # each served once, none lost
    assert all(status == 200 for _, _, _, status, _ in served)
    assert arrivals == len(served) + len(refused), (arrivals, len(served), len(refused))
    seqs = [s[0] for s in served]
    assert seqs == sorted(set(seqs)), 'served out of arrival order'
    assert all(x[2] <= y[1] for x, y in zip(served, served[1:])), 'two jobs served at once'
    mib = lambda n: f"{n / 2**20:.1f} MiB"
    assert rss1 - rss0 <= RSS_SLACK, (f"RSS {mib(rss0)} before {len(served)} requests ({len(refused)} refused), "
                                      f"{mib(rss1)} after: +{mib(rss1 - rss0)}, over the {mib(RSS_SLACK)} allowed")
    assert not leaked, f"{len(leaked)} jobs alive beyond the worker's {b.worker.recent.maxlen} recent ones"

HANGUPS = 20

def test_clients_that_hang_up_midstream_leave_every_other_answer_the_sessions_text(srv, expected):
    """20 clients open a stream that would run to the limit and hang up after a seeded number of chunks (0 to 4);
    4 others, among them, ask for the greedy texts, whole and streamed. At most 5 are at the server at once (one
    served, three waiting, one refused and retrying), so that hang-ups happen while others wait. Every other answer
    is the session's own text; every hung-up job ends 499 (cancelled: it would have run to the limit); the server
    is idle afterwards and answers the session's text again."""
    rng, refused, bias, c = random.Random(26), [], endless(expected), client(srv)
    points = [rng.randrange(5) for _ in range(HANGUPS)]  # chunks read before hanging up
    def hang_up(k:int):
        stream = patient(lambda: c.completions.create(model=MODEL, prompt=CITY, max_tokens=LIMIT, temperature=0,
                                                      stream=True, logit_bias=bias), refused)
        chunks = iter(stream)
        for _ in range(k): next(chunks)
        stream.close()
    def served(i:int) -> str:
        kw = dict(model=MODEL, max_tokens=8, temperature=0, stream=i % 2 == 1)
        if i < 2: r = patient(lambda: c.chat.completions.create(messages=RIVER, **kw), refused)
        else: r = patient(lambda: c.completions.create(prompt=CITY, **kw), refused)
        return text_of(r) if kw['stream'] else r.choices[0].message.content if i < 2 else r.choices[0].text
    first = srv.worker.arrivals
    with concurrent.futures.ThreadPoolExecutor(MAX_QUEUE + 2) as pool:
        order = [(hang_up, k) for k in points]
        for i in range(4): order.insert(3 + 5 * i, (served, i))  # among the hang-ups: the pool starts them in order
        tasks = [pool.submit(*t) for t in order]
        answers = [f.result(timeout=120) for f in tasks]
    jobs = lambda: [j for j in list(srv.worker.recent) if j.seq >= first]
    wait_for(lambda: len(jobs()) == HANGUPS + 4, 'every job to finish')
    assert [a for a in answers if a is not None] == [expected['chat']] * 2 + [expected['text']] * 2
    hung = [j for j in jobs() if j.max_tokens == LIMIT]
    assert len(hung) == HANGUPS and {j.status for j in hung} == {499} and all(j.usage is None for j in hung)
    assert {j.status for j in jobs() if j.max_tokens == 8} == {200}
    assert call(srv, '/health')[1] == dict(status='ok', model=MODEL, busy=False, waiting=0)
    assert chat(srv).choices[0].message.content == expected['chat']

def serve_child(port:int) -> tuple:
    "`edge0 serve` on `port` and the first line it writes on stderr (the address, once it listens and has loaded)"
    import subprocess
    p = subprocess.Popen([Path(sys.executable).parent / 'edge0', 'serve', '-m', MODEL, '--port', str(port)],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    return p, p.stderr.readline()

def test_a_server_killed_midstream_starts_again_on_the_same_port_at_once(expected):
    """`edge0 serve` killed (SIGKILL) in the middle of a streamed answer: its client's stream fails with a
    connection error, and the command started again at once on the same port binds and answers the session's
    greedy text. The killed server's end of the connection is still closing then (FIN_WAIT or TIME_WAIT): without
    SO_REUSEADDR on the listening socket the new server would fail with 'Address already in use'."""
    port = free_port()
    killed, line = serve_child(port)
    again = None
    try:
        assert f"serving {MODEL} at http://127.0.0.1:{port}/v1" in line, line
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key='none', max_retries=0, timeout=60)
        stream = c.completions.create(model=MODEL, prompt=CITY, max_tokens=LIMIT, temperature=0, stream=True,
                                      logit_bias=endless(expected))
        chunks = iter(stream)
        next(chunks), next(chunks)
        killed.kill()
        killed.wait(timeout=30)
        again, line = serve_child(port)
        assert f"serving {MODEL} at http://127.0.0.1:{port}/v1" in line, line
        with pytest.raises(openai.APIConnectionError):
            for _ in range(LIMIT): next(chunks)  # what the killed server had sent, then the connection's end
        r = c.chat.completions.create(model=MODEL, messages=RIVER, max_tokens=8, temperature=0)
        assert r.choices[0].message.content == expected['chat']
    finally:
        for p in (killed, again):
            if p is not None:
                p.kill()
                p.wait(timeout=30)
                p.stderr.close()

def test_too_long_too_many_and_too_big_are_4xx_naming_the_field_through_the_openai_client(srv, expected):
    """What OpenAI's client can send that this server cannot serve: a prompt past the model's context, max_tokens
    past the server's limit or past the room the prompt leaves, a body past max_body_bytes. Each is a 4xx, raised
    by the client at once (streamed or not: nothing has been generated), whose error names the field; a body too
    big is refused before it is read, so its error names the limit instead."""
    c, long = client(srv), 'word ' * 5000
    cases = [  # (request, error, param, code, in the message)
        (lambda: c.completions.create(model=MODEL, prompt=long, max_tokens=8), openai.BadRequestError, 'prompt',
         'context_length_exceeded', "tokens; the model's context is 4096"),
        (lambda: c.completions.create(model=MODEL, prompt=long, max_tokens=8, stream=True), openai.BadRequestError,
         'prompt', 'context_length_exceeded', "tokens; the model's context is 4096"),
        (lambda: c.chat.completions.create(model=MODEL, messages=[dict(role='user', content=long)], max_tokens=8),
         openai.BadRequestError, 'messages', 'context_length_exceeded', "tokens; the model's context is 4096"),
        (lambda: c.chat.completions.create(model=MODEL, messages=RIVER, max_tokens=LIMIT + 1),
         openai.BadRequestError, 'max_tokens', None, f"max_tokens must be in [1, {LIMIT}] (this server's limit)"),
        (lambda: c.chat.completions.create(model=MODEL, messages=RIVER, max_completion_tokens=LIMIT + 1, stream=True),
         openai.BadRequestError, 'max_completion_tokens', None, f"max_completion_tokens must be in [1, {LIMIT}]"),
        (lambda: c.completions.create(model=MODEL, prompt='word ' * 4000, max_tokens=LIMIT),
         openai.BadRequestError, 'max_tokens', 'context_length_exceeded', f"max_tokens asks for {LIMIT} more"),
        (lambda: c.completions.create(model=MODEL, prompt='x' * BODY, max_tokens=8), openai.APIStatusError, None,
         'request_too_large', f"the body is over this server's limit of {BODY} bytes"),
    ]
    for ask, error, param, code, message in cases:
        with pytest.raises(error) as e: ask()
        assert type(e.value) is error and 400 <= e.value.status_code < 500, e.value
        assert (e.value.param, e.value.code) == (param, code) and message in e.value.message, e.value.body
    assert chat(srv).choices[0].message.content == expected['chat']

def test_a_second_server_on_the_port_of_one_still_loading_fails_at_once(monkeypatch):
    """A second server on the port of one still loading its model fails at once: the first listens from its bind.
    (With SO_REUSEADDR, a socket only bound does not keep another from binding the same port: the second loaded its
    model and only then failed, as it started.)"""
    import edge0.openai_api
    from edge0.files import InputError
    loading, loaded = threading.Event(), threading.Event()
    def session(*a, **kw):  # stands in for the model's load, which the test holds
        loading.set()
        loaded.wait(10)
        raise InputError('the model was not loaded')
    monkeypatch.setattr(edge0.openai_api, 'Session', session)
    port, failed = free_port(), []
    def first():
        try:
            with serve_in_background(MODEL, port=port): pass
        except InputError as e: failed.append(str(e))
    t = threading.Thread(target=first)
    t.start()
    try:
        assert loading.wait(10)
        with pytest.raises(InputError, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
            with serve_in_background(MODEL, port=port): pass
    finally:
        loaded.set()
        t.join(10)
    assert failed == ['the model was not loaded']
