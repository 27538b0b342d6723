from sweeper.trial.garbage import garbage_reasons
from sweeper.sim import text as simtext


def test_language_passes():
    assert garbage_reasons(" one when a over memory no more a you new who his slow first also from") == []
    assert garbage_reasons("The capital of France is Paris. It is known for the Eiffel Tower.") == []


def test_each_kind_of_garbage_is_named():
    assert "empty output" in garbage_reasons("   ")
    assert any("letters, digits" in r for r in garbage_reasons(" ¤Ã?▁Ġ * ½#ð%# ^*¤Ġ~ Ċ<ð%¤ð ~?¤Ã"))
    assert any("'the' is" in r for r in garbage_reasons("the the the the the the the the cat"))
    assert any("entropy" in r for r in garbage_reasons("!!!!!!!!!!!!!!!!!!!!!!!!"))
    assert any("<unk>" in r for r in garbage_reasons("hello <unk><unk> world"))


def test_every_simulator_garbage_output_is_caught_and_its_greedy_output_is_not():
    key = simtext.prompt_key("The capital of France is")
    assert garbage_reasons("".join(simtext.greedy_token(key, i) for i in range(16))) == []
    for config in range(50):
        seed = simtext.config_seed(f"config-{config}")
        assert garbage_reasons("".join(simtext.garbage_token(seed, key, i) for i in range(16)))
