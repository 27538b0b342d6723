from sweeper.study.resume import changed_paths


def test_changed_paths_names_each_change():
    old = {"parameters": {"tp": {"choices": [2, 4]}, "ep": {"choices": [1]}}, "budget": {"trials": 5}}
    new = {"parameters": {"tp": {"choices": [2, 4, 8]}, "pp": {"choices": [1]}}, "budget": {"trials": 5}}
    assert changed_paths(old, new) == ["parameters.ep (removed)", "parameters.pp (added)", "parameters.tp.choices"]
    assert changed_paths(old, old) == []
