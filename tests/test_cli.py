"The `edge0` command as a user runs it: a subprocess, its output and its exit status."
import json, subprocess

def run(cmd, *args):
    return subprocess.run([cmd, *map(str, args)], capture_output=True, text=True, timeout=300)

def test_zoo_spec_generate(edge0_cmd, tmp_path):
    dst = tmp_path / 'mixtral'
    r = run(edge0_cmd, 'zoo', 'mixtral', dst, '--seed', 1)
    assert r.returncode == 0, r.stderr
    assert json.loads((dst / 'config.json').read_text())['quantization']['bits'] == 4
    r = run(edge0_cmd, 'spec', dst)
    assert r.returncode == 0 and 'model_type     mixtral' in r.stdout and 'K=4' in r.stdout
    r = run(edge0_cmd, 'generate', '--model', dst, '--prompt', 'The quick brown fox', '--max-tokens', 6)
    assert r.returncode == 0, r.stderr
    assert 'decode 6 tokens' in r.stdout and 'MiB resident' in r.stdout and "MLX's arrays at most" in r.stdout

def test_generate_is_deterministic_when_greedy(edge0_cmd, tiny_qwen):
    outs = [run(edge0_cmd, 'generate', '--model', tiny_qwen, '--prompt', 'Once upon', '--max-tokens', 10).stdout.splitlines()[0]
            for _ in range(2)]
    assert outs[0] == outs[1]

def test_errors_name_the_fault(edge0_cmd, tmp_path, tiny_qwen):
    r = run(edge0_cmd, 'generate', '--model', tmp_path / 'missing', '--prompt', 'x')
    assert r.returncode == 2 and 'missing does not exist' in r.stderr, r.stderr
    (tmp_path / 'notamodel').mkdir()
    r = run(edge0_cmd, 'spec', tmp_path / 'notamodel')
    assert r.returncode == 2 and 'config.json is missing' in r.stderr
    bad = tmp_path / 'dense'; bad.mkdir(); (bad / 'config.json').write_text(json.dumps({'model_type': 'llama'}))
    r = run(edge0_cmd, 'spec', bad)
    assert r.returncode == 2 and "'llama' is not a supported MoE" in r.stderr and 'qwen3_moe' in r.stderr
    r = run(edge0_cmd, 'zoo', 'qwen3_moe', tiny_qwen)
    assert r.returncode == 2 and 'exists' in r.stderr
    assert (tiny_qwen / 'config.json').exists()  # the refused build left the model alone
    r = run(edge0_cmd, 'generate', '--model', tiny_qwen, '--prompt', 'x', '--max-tokens', 0)
    assert r.returncode == 2 and '--max-tokens' in r.stderr

def test_exact_top_as_a_user_runs_it(edge0_cmd):
    "--exact-top M on the bundled teacher: the counters in --stats; out of range or without routing: one line, exit 2"
    r = run(edge0_cmd, 'generate', '-m', 'edge0-tiny', '-p', 'The history of the city', '--ignore-chat-template',
            '--max-tokens', 8, '--mode', 'routing', '--exact-top', 1, '--stats')
    assert r.returncode == 0, r.stderr
    assert '0 dropped' in r.stdout and '5.0 host syncs/step' in r.stdout and 'exact top-1: the own heaviest' in r.stdout
    for flags, says in ((('--mode', 'prefetch', '--exact-top', 1), '--exact-top 1 needs --mode routing'),
                        (('--mode', 'routing', '--k', 4, '--exact-top', 5),
                         'exact top-M must be between 0 and K=4, got 5')):
        r = run(edge0_cmd, 'generate', '-m', 'edge0-tiny', '-p', 'x', *flags)
        assert r.returncode == 2 and says in r.stderr and 'Traceback' not in r.stderr, (flags, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for flags, says in ((('--modes', 'off', '--exact-top', 1), '--exact-top needs the routing mode in --modes'),
                        (('--modes', 'routing', '--k', 4, '--exact-top', '1,5'), 'between 0 and K=4, got 5')):
        r = run(edge0_cmd, 'bench', '--model', 'edge0-tiny', *flags)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (flags, r.stderr)

def test_version_and_python_m(edge0_cmd):
    import edge0, sys
    r = run(edge0_cmd, '--version')
    assert r.returncode == 0 and r.stdout.strip() == f"edge0 {edge0.__version__}"
    r = run(sys.executable, '-m', 'edge0', '--version')
    assert r.returncode == 0 and r.stdout.strip() == f"edge0 {edge0.__version__}"

def test_bundled_model_by_name_from_anywhere(edge0_cmd, tmp_path):
    "`--model edge0-tiny` names the bundled model whatever the working directory"
    r = subprocess.run([edge0_cmd, 'generate', '-m', 'edge0-tiny', '-p', 'The history of the city', '--max-tokens', '6',
                        '--ignore-chat-template'], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert 'decode 6 tokens' in r.stdout

def test_hugging_face_repo_id_from_a_populated_cache_offline(edge0_cmd, tmp_path):
    "A repo id resolves through the hub cache (the layout huggingface_hub writes), with the network off"
    import os, shutil
    from edge0.files import teacher_path
    repo = tmp_path / 'hub' / 'models--edge0-ai--edge0-tiny-int4'
    shutil.copytree(teacher_path(), repo / 'snapshots' / ('a' * 40))
    (repo / 'refs').mkdir()
    (repo / 'refs' / 'main').write_text('a' * 40)
    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / 'hub'), HF_HUB_OFFLINE='1')
    def edge0(*args):
        return subprocess.run([edge0_cmd, *args], capture_output=True, text=True, timeout=300, env=env)
    r = edge0('generate', '-m', 'edge0-ai/edge0-tiny-int4', '-p', 'The history of the city', '--max-tokens', '6',
              '--ignore-chat-template', '--verbose', 'False')
    local = run(edge0_cmd, 'generate', '-m', 'edge0-tiny', '-p', 'The history of the city', '--max-tokens', '6',
                '--ignore-chat-template', '--verbose', 'False')
    assert r.returncode == 0, r.stderr
    assert r.stdout == local.stdout
    r = edge0('generate', '-m', 'edge0-ai/not-there', '-p', 'x')
    assert r.returncode == 2 and 'HF_HUB_OFFLINE is set' in r.stderr and len(r.stderr.strip().splitlines()) == 1

def test_generate_flags_as_mlx_lm_names_them(edge0_cmd):
    base = ('generate', '-m', 'edge0-tiny', '--max-tokens', '8', '--verbose', 'False')
    piped = subprocess.run([edge0_cmd, *base, '-p', '-', '--ignore-chat-template'], input='The history of the city',
                           capture_output=True, text=True, timeout=300)
    direct = run(edge0_cmd, *base, '-p', 'The history of the city', '--ignore-chat-template')
    assert piped.returncode == 0 and piped.stdout == direct.stdout
    sampled = [run(edge0_cmd, *base, '-p', 'Hello', '--temp', '1.0', '--top-p', '0.9', '--min-p', '0.05',
                   '--top-k', '50').stdout for _ in range(3)]
    assert len(set(sampled)) > 1  # no seed: the draw differs run to run
    r = run(edge0_cmd, *base, '-p', 'Hello', '--mode', 'routing', '--k', '4', '--temp', '3', '--top-k', '1',
            '--extra-eos-token', '<|im_start|>', '--max-kv-size', '64', '--system-prompt', 'Be brief.')
    greedy = run(edge0_cmd, *base, '-p', 'Hello', '--mode', 'routing', '--k', '4', '--system-prompt', 'Be brief.')
    assert r.returncode == 0 and r.stdout == greedy.stdout, r.stderr  # top-k 1 is greedy on the prerouted path
    for args, word in ((('--min-p', '2'), '--min-p must be in [0, 1]'), (('--top-k', '-1'), '--top-k must be'),
                       (('--verbose', 'maybe'), 'expected True or False'), (('--temp', 'hot'), 'invalid float')):
        r = run(edge0_cmd, *base, '-p', 'x', *args)
        assert r.returncode == 2 and word in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

def test_chat_over_a_pipe(edge0_cmd):
    r = subprocess.run([edge0_cmd, 'chat', '-m', 'edge0-tiny', '--max-tokens', '6'], timeout=300, capture_output=True,
                       text=True, input="Tell me about the river.\nAnd the bridge?\n/stats\n/reset\n/quit\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith('edge0 chat with edge0-tiny') and len(out[1]) > 0 and len(out[2]) > 0
    assert '2 replies' in r.stdout and 'from the cache' in r.stdout and 'forgotten' in r.stdout

def test_phase3_of_any_model_refuses_in_one_line(edge0_cmd, tmp_path):
    "`edge0 train MODEL --phase distil` of a model that is not a bundled teacher: what it needs, said before anything runs"
    import shutil
    from edge0.files import teacher_path
    model = tmp_path / 'tiny'
    shutil.copytree(teacher_path('edge0-tiny'), model, ignore=shutil.ignore_patterns('lora*'))
    for flags, says in (((model, '--phase', 3, '--k', 2), 'train them with `edge0 train'),
                        ((model, '--phase', 3, '--teacher', teacher_path('edge0-tiny-ds', int4=False)),
                         "is not " + f"{model}'s model"),
                        ((model, '--phase', 3, '--tokens', 100), '--tokens is for --phase heads'),
                        ((model, '--phase', 3, '--capture', 'mlx'), '--capture is for --phase heads'),
                        ((model, '--phase', 1, '--capture', 'torch', '--tokens', 512),
                         "capture='torch': the torch step cannot serve qwen3_moe here"),
                        (('edge0-tiny', '--phase', 2, '--teacher', model), '--teacher is for --phase distil'),
                        ((model, '--phase', 1, '--exact-top', 1), '--exact-top is for --phase sft and distil, not heads'),
                        ((model, '--phase', 3, '--k', 4, '--exact-top', 5), '--exact-top 5: expected 0 to K=4'),
                        ((model, '--phase', 3, '--exact-top', 9), '--exact-top 9: expected 0 to K=8'),
                        (('edge0-tiny', '--phase', 2, '--exact-top', -1), '--exact-top -1: expected 0 to K')):
        r = run(edge0_cmd, 'train', *flags, '--work', tmp_path / 'work')
        assert r.returncode == 2 and says in r.stderr and 'Traceback' not in r.stderr, (flags, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert sorted(p.name for p in model.iterdir()) == sorted(p.name for p in teacher_path('edge0-tiny').iterdir()
                                                             if not p.name.startswith('lora'))  # nothing written

def test_mode_auto_as_a_user_runs_it(edge0_cmd, tiny_qwen, tmp_path):
    "--mode auto: routing with a note naming `edge0 plan` where no plan was made; off where the model has no heads"
    import os
    env = dict(os.environ, EDGE0_CACHE=str(tmp_path / 'cache'))
    args = ('-p', 'The history of the city', '--ignore-chat-template', '--max-tokens', '6', '--mode', 'auto')
    r = subprocess.run([edge0_cmd, 'generate', '-m', 'edge0-tiny', '--k', '8', *args, '--stats'], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert 'auto: no plan of this machine' in r.stderr + r.stdout and 'edge0 plan' in r.stderr + r.stdout
    assert 'mode routing K=8' in r.stdout, r.stdout
    r = subprocess.run([edge0_cmd, 'generate', '-m', str(tiny_qwen), *args, '--stats'], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert 'auto: no prerouter heads' in r.stderr + r.stdout and 'mode off' in r.stdout, r.stdout

def test_spec_answers_every_moe_type_of_mlx_lm(edge0_cmd, tmp_path, capsys):
    """`edge0 spec` on every MoE module of the installed mlx-lm (one that builds SwitchGLU or SwitchMLP): a zoo
    checkpoint of each streamed family is described, every other type is refused in one line that says why"""
    import contextlib, io, mlx_lm
    from pathlib import Path
    from edge0.cli import main
    from edge0.routing import SUPPORTED
    from edge0.zoo import build_tiny
    mods = Path(mlx_lm.__file__).parent / 'models'
    moe = sorted(p.stem for p in mods.glob('*.py') if p.stem != 'switch_layers'
                 and ('SwitchGLU' in p.read_text() or 'SwitchMLP' in p.read_text()))
    assert len(moe) >= 40, moe
    for mt in moe:
        d = tmp_path / mt
        if mt in SUPPORTED:
            with contextlib.redirect_stdout(io.StringIO()): build_tiny(mt, d)
        else:
            d.mkdir(); (d / 'config.json').write_text(json.dumps({'model_type': mt}))
        capsys.readouterr()
        code = main(['spec', str(d)])
        out, err = capsys.readouterr()
        if mt in SUPPORTED: assert code == 0 and f'model_type     {mt}' in out, (mt, out, err)
        else:
            assert code == 2 and out == '' and len(err.strip().splitlines()) == 1, (mt, out, err)
            assert f"model_type {mt!r} is an MoE edge0 does not stream: " in err, (mt, err)
    # as a user sees it: one line on stderr, exit 2, no traceback
    r = run(edge0_cmd, 'spec', tmp_path / 'longcat_flash')
    assert r.returncode == 2 and r.stderr.count('\n') == 1 and 'identity experts' in r.stderr, r.stderr
    r = run(edge0_cmd, 'spec', tmp_path / 'gpt_oss')
    assert r.returncode == 0 and 'model_type     gpt_oss' in r.stdout, r.stderr
    r = run(edge0_cmd, 'spec', tmp_path / 'gemma4_text')  # the layer is the block: said what it does
    assert r.returncode == 0 and 'router normalizes its input, per-expert weight scales' in r.stdout, r.stderr

def test_bench_reports_the_time_to_first_token(edge0_cmd, tmp_path):
    "`edge0 bench` prints the time to the first token, cold and warm, in seconds, and writes both to its JSON"
    out = tmp_path / 'r.json'
    r = run(edge0_cmd, 'bench', '--model', 'edge0-tiny', '--rounds', 1, '--tokens', 1, '--prompt', 8,
            '--prefill-path', 'whole_layer', '--out', tmp_path, '--json', out)
    assert r.returncode == 0, r.stderr
    assert 'first token c/w s' in r.stdout
    res = json.loads(out.read_text())['tiers']['nvme']['results']['off']
    assert res['ttft_cold_s'] > 0 and res['ttft_warm_s'] > 0
    assert abs(res['prefill_cold_tps'] * res['ttft_cold_s'] - 8) < 1e-6  # the prompt's 8 tokens in that time
    r = run(edge0_cmd, 'bench', '--model', 'edge0-tiny', '--prefill-path', 'fast')
    assert r.returncode == 2 and "--prefill-path: invalid choice: 'fast'" in r.stderr
