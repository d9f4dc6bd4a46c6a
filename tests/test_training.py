"The teacher recipe end to end on a stand-in corpus (tests never need ../shared), and the committed teachers."
import gzip, json
from pathlib import Path
import pytest

def fake_corpus(d: Path) -> Path:
    "Three gzip files cut from the committed held-out excerpt, named like the real corpus"
    from edge0.teachers import CORPUS
    from edge0.files import heldout_excerpt
    d.mkdir()
    for name, text in zip(CORPUS, heldout_excerpt().values()):
        with gzip.open(d / name, 'wt', encoding='utf-8') as f: f.write(text * 3)
    return d

def test_reproduce_is_exact_on_a_few_steps(tmp_path):
    from edge0.teachers import reproduce
    corpus = fake_corpus(tmp_path / 'corpus')
    runs = [reproduce('edge0-tiny-ds', corpus, tmp_path / f'work{i}', tmp_path / f'out{i}', steps=3, show=False) for i in range(2)]
    for (f0, b0), (f1, b1) in zip([runs[0]], [runs[1]]):
        for a, b in ((f0, f1), (b0, b1)):
            assert (a / 'model.safetensors').read_bytes() == (b / 'model.safetensors').read_bytes()
    prov = json.loads((runs[0][0] / 'config.json').read_text())['edge0_provenance']
    assert prov['steps'] == 3 and prov['precision'] == 'bf16' and 'held out' in prov['data']
    assert json.loads((runs[0][1] / 'config.json').read_text())['quantization']['bits'] == 4

def test_resume_after_interruption_matches(tmp_path):
    "Interrupted after 2 of 4 steps (checkpoint written), then reproduce resumes it: same bytes as 4 straight steps"
    from edge0.teachers import reproduce, recipe, prepare, Trainer
    corpus = fake_corpus(tmp_path / 'corpus')
    straight = reproduce('edge0-tiny-ds', corpus, tmp_path / 'a', tmp_path / 'outa', steps=4, show=False)[0]
    _, tokens, _ = prepare(corpus, tmp_path / 'b')
    Trainer(recipe('edge0-tiny-ds', 4), tokens, tmp_path / 'b' / 'edge0-tiny-ds-ckpt').run(until=2, show=False)
    resumed = reproduce('edge0-tiny-ds', corpus, tmp_path / 'b', tmp_path / 'outb', steps=4, show=False)[0]
    assert (straight / 'model.safetensors').read_bytes() == (resumed / 'model.safetensors').read_bytes()
    with pytest.raises(ValueError, match='another recipe'):  # a checkpoint of another recipe is refused, not mixed in
        reproduce('edge0-tiny-ds', corpus, tmp_path / 'b', tmp_path / 'outc', steps=5, show=False)

@pytest.mark.parametrize('name', ['edge0-tiny', 'edge0-tiny-ds', 'edge0-tiny-q35'])
def test_committed_teachers_load_and_stream(name):
    import mlx_lm
    from edge0.backend import core as B
    from edge0.files import teacher_path
    from edge0.streaming import load
    for int4 in (False, True):
        m, tok = mlx_lm.load(str(teacher_path(name, int4)))
        assert m(B.array([tok.encode('The city')])).shape[-1] == 8192
    with load(teacher_path(name), kernels='mlx') as handle:
        assert handle.model(B.array([handle.tokenizer.encode('The city')])).shape[-1] == 8192

def test_bad_inputs_are_input_errors(tmp_path):
    "An unknown teacher and a corpus folder without the corpus files are refused with messages that name them"
    from edge0.files import InputError
    from edge0.teachers import recipe, corpus_split
    with pytest.raises(InputError, match='unknown teacher'): recipe('edge0-huge')
    with pytest.raises(InputError, match='wiki_vital_en.txt.gz'): corpus_split(tmp_path)
