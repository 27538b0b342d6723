"""How a study gets its reference outputs: the named seed, two agreeing configs, or a file; trials
measured before it that disagree are ranked out."""

from dataclasses import asdict

import optuna
import pytest

from sweeper.spec.space_file import parse_space
from sweeper.trial.gate import OutputSample, write_reference_file
from sweeper.errors import ConfigError
from sweeper.study.reference import REFERENCE_FILE, reference_samples, settle_reference, use_reference_file
from sweeper.study.trials import infeasible_reason

SPACE_TEXT = """\
name: r
engine: sim
model: m
parameters:
  tp: {type: categorical, choices: [4, 8], flag: --tp-size}
seeds:
  - {name: base, params: {tp: 8}}
check: {prompts: ["a", "b"], k_tokens: 3}
"""
SPACE = parse_space(SPACE_TEXT + "reference: base\n", "inline")
UNNAMED = parse_space(SPACE_TEXT, "inline")

GOOD = [OutputSample("a", " x y z"), OutputSample("b", " p q r")]
GOOD_TP4 = [OutputSample("a", " x y w"), OutputSample("b", " p q r")]  # a late flip: 5 of 6 agree
BAD = [OutputSample("a", " ¤Ã ?▁"), OutputSample("b", " Ġ~ ¤")]


def finish(study, key, samples, seed=None, value=1.0):
    trial = study.ask()
    trial.set_user_attr("config_key", key)
    trial.set_user_attr("output_samples", [asdict(s) for s in samples])
    if seed:
        trial.set_user_attr("seed", seed)
    return trial, value


def test_the_named_seed_sets_the_reference_and_earlier_disagreeing_trials_are_ranked_out(tmp_path):
    study = optuna.create_study(direction="maximize")
    early_bad, v = finish(study, "k-bad", BAD)
    settle_reference(study, SPACE, tmp_path, early_bad, BAD)  # not the seed: no reference yet
    study.tell(early_bad, v)
    early_ok, v = finish(study, "k-tp4", GOOD_TP4)
    study.tell(early_ok, v)
    assert reference_samples(study) is None

    seed, v = finish(study, "k-base", GOOD, seed="base")
    settle_reference(study, SPACE, tmp_path, seed, GOOD)
    study.tell(seed, v)
    assert reference_samples(study) == GOOD
    assert study.user_attrs["reference_source"] == f"seed base (trial {seed.number})"
    assert (tmp_path / REFERENCE_FILE).is_file()
    trials = {t.number: t for t in study.get_trials()}
    reference, rejected = study.user_attrs["reference_text"], study.user_attrs["output_rejected"]
    assert infeasible_reason(trials[early_bad.number], reference, rejected) == "check_output/bad_output"
    assert "agreement" in rejected[str(early_bad.number)]
    assert infeasible_reason(trials[early_ok.number], reference, rejected) is None  # within tolerance


def test_without_a_named_seed_two_different_agreeing_configs_set_it(tmp_path):
    study = optuna.create_study(direction="maximize")
    first, v = finish(study, "k1", GOOD)
    settle_reference(study, UNNAMED, tmp_path, first, GOOD)
    study.tell(first, v)
    same_config, v = finish(study, "k1", GOOD)
    settle_reference(study, UNNAMED, tmp_path, same_config, GOOD)
    study.tell(same_config, v)
    assert reference_samples(study) is None  # the same config twice proves nothing
    garbage, v = finish(study, "k2", BAD)
    settle_reference(study, UNNAMED, tmp_path, garbage, BAD)
    study.tell(garbage, v)
    assert reference_samples(study) is None
    other, v = finish(study, "k3", GOOD_TP4)
    settle_reference(study, UNNAMED, tmp_path, other, GOOD_TP4)
    study.tell(other, v)
    assert reference_samples(study) == GOOD_TP4
    assert study.user_attrs["reference_source"].startswith("agreement of trials 0 and 3")


def test_a_reference_file_is_used_before_the_first_trial(tmp_path):
    space = parse_space(SPACE_TEXT + "reference: base\n".replace("reference: base", "")
                        .rstrip() + "\n", "inline").model_copy(
        update={"check": SPACE.check.model_copy(update={"reference_file": "ref.json"})})
    write_reference_file(tmp_path / "ref.json", GOOD, "by hand")
    study = optuna.create_study()
    use_reference_file(study, space, tmp_path / "study", base=tmp_path)
    assert reference_samples(study) == GOOD and study.user_attrs["reference_source"] == f"file {tmp_path / 'ref.json'}"
    missing = space.model_copy(update={"check": space.check.model_copy(update={"reference_file": "nope.json"})})
    with pytest.raises(ConfigError, match="reference file not found"):
        use_reference_file(optuna.create_study(), missing, tmp_path / "s2", base=tmp_path)
