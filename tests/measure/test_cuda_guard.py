"""The CUDA path's guards, as far as they run without a GPU."""

import pytest

from workbench.errors import RuntimeUnavailableError
from workbench.ort.session import create_session, cuda_status, probe_cuda_provider


def test_cuda_status_names_what_is_missing_without_noise(capfd):
    ok, why = cuda_status()
    if ok:
        pytest.skip("a GPU is present")
    assert why and "\n" not in why
    assert "GPU" in why or ".so" in why or "CUDA" in why
    assert capfd.readouterr().err == ""


def test_a_provider_that_fails_to_load_is_named(capfd):
    ok, why = probe_cuda_provider()
    if ok:
        pytest.skip("the CUDA provider loads here")
    # onnxruntime-gpu is installed but CUDA libraries are not: the missing library is named.
    assert "cannot load lib" in why or "failed to load" in why or "fell back" in why, why
    assert "[E:onnxruntime" not in capfd.readouterr().err


def test_asking_for_cuda_raises_instead_of_falling_back(tiny_export):
    if cuda_status()[0]:
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeUnavailableError, match="GPU asked for"):
        create_session(tiny_export().path, "cuda")
