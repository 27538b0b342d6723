"""The space checks read spec/engine_traits.py, the adapters build their EngineInfo from it: the two agree."""

import pytest

from sweeper.engines import ENGINES, get_engine
from sweeper.spec.engine_traits import PARALLEL_FLAGS, request_api


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_each_adapter_has_the_traits_the_space_is_checked_against(name):
    info = get_engine(name).info
    assert info.dialect.api == request_api(name)
    assert tuple(map(tuple, info.parallel_flags)) == PARALLEL_FLAGS.get(name, ())
