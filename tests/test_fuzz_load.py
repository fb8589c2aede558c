"""Fuzz the load path: mutated bytes of a valid model give only the project's own errors."""

import os

from hypothesis import HealthCheck, given, settings, strategies as st

import badmodels as bm
from workbench.errors import ModelIOError
from workbench.modelio import load_model

EXAMPLES = int(os.environ.get("WORKBENCH_FUZZ_EXAMPLES", "600"))
VALID = bm.add_model().SerializeToString()

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, len(VALID) - 1), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, len(VALID) - 1), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, len(VALID)), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, len(VALID) - 1), st.integers(1, 8)),
)


def _apply(data: bytes, muts) -> bytes:
    b = bytearray(data)
    for kind, pos, val in muts:
        pos = min(pos, max(len(b) - 1, 0))
        if kind == "flip" and b:
            b[pos] ^= val
        elif kind == "cut":
            del b[pos:]
        elif kind == "insert":
            b.insert(pos, val)
        elif kind == "delete":
            del b[pos:pos + val]
    return bytes(b)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(muts=st.lists(mutation, min_size=1, max_size=4))
def test_mutated_models_only_raise_clear_errors(tmp_path_factory, muts):
    folder = tmp_path_factory.mktemp("fuzz", numbered=True)
    p = folder / "m.onnx"
    p.write_bytes(_apply(VALID, muts))
    try:
        m = load_model(p)
    except ModelIOError as e:
        msg = str(e)
        assert msg and "\n" not in msg
        return
    # Some mutations still leave a valid model (e.g. a changed name): it must be usable.
    assert m.graph is not None
