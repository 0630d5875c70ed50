"""training/train.py --draft-size: the draft at another width, checked before any training runs,
and the model it builds has that width."""
import pytest

from training.train import DRAFT, build_model, draft_spec
from tests.tiny_models import tiny_pair_dirs


def test_the_default_size_is_the_shipped_drafts():
    assert draft_spec("") == DRAFT


def test_another_width_keeps_the_rest_of_the_draft():
    spec = draft_spec("160,5,640")
    assert (spec.hidden, spec.heads, spec.ffn) == (160, 5, 640)
    assert (spec.kind, spec.layers, spec.vocab_size) == (DRAFT.kind, DRAFT.layers, DRAFT.vocab_size)


@pytest.mark.parametrize("bad", ["160,5", "160,3,640", "a,b,c", "0,1,8"])
def test_a_bad_size_is_one_line(bad):
    with pytest.raises(SystemExit) as err:
        draft_spec(bad)
    assert str(err.value).startswith("--draft-size: ") and "\n" not in str(err.value)


def test_the_model_built_has_that_width():
    from transformers import AutoTokenizer
    _, draft_dir = tiny_pair_dirs()
    model = build_model(draft_spec("64,4,128"), AutoTokenizer.from_pretrained(draft_dir))
    assert (model.config.n_embd, model.config.n_head, model.config.n_inner) == (64, 4, 128)
