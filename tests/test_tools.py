"""Tool calls through `edge0 serve`, driven by OpenAI's own client (issue 49): a request with tools gets the model's
call back as `tool_calls`, the tool's answer goes back and the model answers, whole and streamed; a call the model
garbles is text, never a 500; `tool_choice` and malformed tools and messages are refused by name. The server serves a
copy of edge0-tiny whose tokenizer carries a tool template in Qwen's format (edge0/data/chat-template-tools.jinja).
A random tiny model never writes a call of itself, so each request's sampling is a scripted one (every token but the
script's next one masked out); the template, the session, the scanner, mlx-lm's parser and the answers are the
server's own."""
import json
import numpy as np
import pytest
import openai
from edge0 import openai_api
from edge0.backend import core as B
from edge0.decode import Sampling
from edge0.files import DATA, teacher_path
from edge0.openai_api import serve_in_background

NAME = 'edge0-tiny-tools'
WEATHER = [dict(type='function', function=dict(name='get_weather', description='The weather in a city',
                                               parameters=dict(type='object', properties=dict(city=dict(type='string')),
                                                               required=['city'])))]
ASK = [dict(role='user', content='What is the weather in Paris?')]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = 'It is 21 C in Paris.'

def scripted(ids:list) -> Sampling:
    "Greedy, with every token but the next of `ids` masked out: a model that writes `ids`"
    class Scripted(Sampling):
        def processors(self):
            left = iter(ids)
            def force(seen, logits):
                mask = np.full(logits.shape, -np.inf, np.float32)
                mask[..., next(left)] = 0
                return logits + B.array(mask)
            return [force]
    return Scripted()

@pytest.fixture(scope='module')
def srv(tmp_path_factory):
    "edge0-tiny with the tool template (its weights linked), served"
    src, dst = teacher_path('edge0-tiny'), tmp_path_factory.mktemp('tools') / NAME
    dst.mkdir()
    for p in src.iterdir():
        if p.name != 'tokenizer_config.json': (dst / p.name).symlink_to(p)
    cfg = json.loads((src / 'tokenizer_config.json').read_text())
    template = (DATA / 'chat-template-tools.jinja').read_text()
    (dst / 'tokenizer_config.json').write_text(json.dumps(dict(cfg, chat_template=template)))
    with serve_in_background(dst, name=NAME) as s: yield s

@pytest.fixture
def script(srv, monkeypatch) -> list:
    """The texts the model writes, one a request, in order (the request's own sampling fields still checked);
    past them, its own"""
    texts, tok, real = [], srv.worker.session.tokenizer, openai_api.sampling_of
    def sampling_of(body):
        own = real(body)
        if not texts: return own
        return scripted(tok.encode(texts.pop(0), add_special_tokens=False) + [tok.eos_token_id])
    monkeypatch.setattr(openai_api, 'sampling_of', sampling_of)
    yield texts
    assert texts == [], 'every scripted text was asked for'

def client(srv): return openai.OpenAI(base_url=f"{srv.url}/v1", api_key='none', max_retries=0, timeout=60)

def ask(srv, messages=ASK, **kw):
    return client(srv).chat.completions.create(**dict(model=NAME, messages=messages, tools=WEATHER, max_tokens=128) | kw)

def answered(call:dict) -> list:
    "The conversation after the model's call: the call, and the tool's answer to it"
    return ASK + [dict(role='assistant', content=None, tool_calls=[call]),
                  dict(role='tool', content='21 C', tool_call_id=call['id'])]

def test_a_round_trip_whole(srv, script):
    script += [CALL, ANSWER]
    a = ask(srv)
    (c,) = a.choices
    assert (c.finish_reason, c.message.content, len(c.message.tool_calls)) == ('tool_calls', None, 1)
    call = c.message.tool_calls[0]
    assert (call.type, call.function.name, json.loads(call.function.arguments)) == \
        ('function', 'get_weather', dict(city='Paris'))
    assert call.id.startswith('call_')
    # the reply's message sent back as it came, as OpenAI's examples do (`refusal: null` and all)
    b = ask(srv, ASK + [c.message, dict(role='tool', content='21 C', tool_call_id=call.id)])
    assert (b.choices[0].message.content, b.choices[0].finish_reason, b.choices[0].message.tool_calls) == \
        (ANSWER, 'stop', None)
    # the template renders the call as the model wrote it, so the cache is reused past it
    assert srv.worker.session.last['reused_tokens'] == a.usage.total_tokens
    shown = srv.worker.session.tokenizer.decode(srv.worker.session.tokens)
    assert '<tool_response>\n21 C\n</tool_response>' in shown and '"name": "get_weather"' in shown

def test_a_round_trip_streamed(srv, script):
    script += ['Let me look.' + CALL, CALL + '\n' + CALL.replace('Paris', 'Lyon'), ANSWER]
    chunks = list(ask(srv, stream=True))
    assert chunks[0].choices[0].delta.role == 'assistant' and {c.id for c in chunks} == {chunks[0].id}
    assert ''.join(c.choices[0].delta.content or '' for c in chunks) == 'Let me look.'
    calls = [t for c in chunks for t in c.choices[0].delta.tool_calls or ()]
    assert [(t.index, t.type, t.function.name, json.loads(t.function.arguments)) for t in calls] == \
        [(0, 'function', 'get_weather', dict(city='Paris'))]
    assert chunks[-1].choices[0].finish_reason == 'tool_calls'
    # OpenAI's own stream helper joins the deltas into the whole message
    with client(srv).chat.completions.stream(model=NAME, messages=ASK, tools=WEATHER, max_tokens=128) as s:
        final = s.get_final_completion()
    two = final.choices[0].message.tool_calls
    assert [json.loads(t.function.arguments)['city'] for t in two] == ['Paris', 'Lyon'] and two[0].id != two[1].id
    assert final.choices[0].finish_reason == 'tool_calls' and not final.choices[0].message.content
    chunks = list(ask(srv, answered(calls[0].model_dump(exclude={'index'})), stream=True))
    assert ''.join(c.choices[0].delta.content or '' for c in chunks) == ANSWER
    assert chunks[-1].choices[0].finish_reason == 'stop'

@pytest.mark.parametrize('text', [CALL.replace('"Paris"}', '"Paris"'), CALL.replace('get_weather', 'get_time'),
                                  CALL[:-len('</tool_call>')], 'Sunny. <tool_call>[]</tool_call>'])
def test_a_call_the_model_garbles_is_its_text(srv, script, text):
    script += [text, text]
    c = ask(srv).choices[0]
    assert (c.message.content, c.message.tool_calls, c.finish_reason) == (text, None, 'stop')
    chunks = list(ask(srv, stream=True))
    assert ''.join(c.choices[0].delta.content or '' for c in chunks) == text
    assert not any(c.choices[0].delta.tool_calls for c in chunks) and chunks[-1].choices[0].finish_reason == 'stop'

def test_tool_choice_none_is_as_if_no_tools_and_what_cannot_be_honoured_is_refused(srv, script):
    script += [CALL, CALL]
    a, b = ask(srv, tool_choice='none'), client(srv).chat.completions.create(model=NAME, messages=ASK, max_tokens=128)
    assert a.choices[0].message.content == b.choices[0].message.content == CALL
    assert a.usage.prompt_tokens == b.usage.prompt_tokens and a.choices[0].finish_reason == 'stop'
    for choice in ('required', dict(type='function', function=dict(name='get_weather'))):
        with pytest.raises(openai.BadRequestError, match=r"is not supported by edge0 serve \(only 'none' or 'auto'") \
                as e:
            ask(srv, tool_choice=choice)
        assert e.value.body['param'] == 'tool_choice'
    with pytest.raises(openai.BadRequestError, match='parallel_tool_calls false is not supported') as e:
        ask(srv, parallel_tool_calls=False)
    assert e.value.body['param'] == 'parallel_tool_calls'

def test_malformed_tools_and_messages_are_refused_naming_them(srv):
    call = dict(id='call_1', type='function', function=dict(name='get_weather', arguments='{"city": "Paris"}'))
    bad = [(dict(tools=[dict(type='function', function=dict(description='x'))]), 'tools', "tools[0] must be"),
           (dict(tools=dict(get_weather={})), 'tools', 'tools must be a list'),
           (dict(messages=answered(dict(call, function=dict(name='get_weather', arguments='{"city"')))),
            'messages[1]', 'messages[1].tool_calls[0].function.arguments must be a JSON object'),
           (dict(messages=answered(call)[:1] + answered(call)[2:]), 'messages[1].tool_call_id',
            "must name a tool call of an earlier assistant message, got 'call_1'"),
           (dict(messages=[dict(ASK[0], tool_calls=[call])]), 'messages[0]',
            'messages[0].tool_calls must be a list on an assistant message'),
           (dict(messages=[dict(role='assistant', content=None)]), 'messages[0]', 'message 0 must be')]
    for kw, param, message in bad:
        with pytest.raises(openai.BadRequestError) as e: ask(srv, **kw)
        assert e.value.body['param'] == param and message in e.value.body['message'], (kw, e.value.body)
    assert ask(srv, messages=answered(call), max_tokens=1).choices[0].finish_reason == 'length'

def test_a_model_without_a_tool_format_is_refused_tools():
    with serve_in_background('edge0-tiny', resident=True, no_adapter=True) as s:
        with pytest.raises(openai.BadRequestError, match="tools: the chat template has no tool-call format"):
            client(s).chat.completions.create(model='edge0-tiny', messages=ASK, tools=WEATHER, max_tokens=4)
        assert client(s).chat.completions.create(model='edge0-tiny', messages=ASK, tools=[],
                                                 max_tokens=4).choices[0].finish_reason == 'length'
