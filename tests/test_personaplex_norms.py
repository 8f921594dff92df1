"""PersonaPlex's LM runs its RMS norms eager, as PersonaPlex's code does: ``moshi`` 0.2.13
compiles them on CUDA, which rounds differently (adapters/personaplex/norms.py); the Moshi family
keeps ``moshi``'s compiled norm."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.personaplex.norms import eager_norms


def _norms(dim: int = 64) -> torch.nn.ModuleList:
    from moshi.modules.transformer import create_norm_fn

    return torch.nn.ModuleList(
        [create_norm_fn("rms_norm_f32", dim), create_norm_fn("rms_norm", dim)]
    )


def _through(norms: torch.nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        for norm in norms:
            x = norm(x)
    return x


def _no_compile_allowed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Compile on (as on CUDA), the lazy norm's cache emptied, and ``torch.compile`` recording
    what asks for it (and running it uncompiled)."""
    import moshi.utils.compile
    from moshi.modules import transformer

    asked: list[str] = []

    def compile_(fn: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(fn.__name__)
        return fn

    monkeypatch.setattr(moshi.utils.compile, "_compile_disabled", False)
    monkeypatch.setattr(torch, "compile", compile_)
    code = transformer._rms_norm.__code__
    if "fun_compiled" not in code.co_freevars:
        pytest.skip("NO_TORCH_COMPILE is set: moshi's norm is not compiled lazily")
    cell = transformer._rms_norm.__closure__[code.co_freevars.index("fun_compiled")]
    monkeypatch.setattr(cell, "cell_contents", None)
    return asked


def test_the_norms_run_the_vendors_body_uncompiled(monkeypatch: pytest.MonkeyPatch) -> None:
    from moshi.modules.transformer import _rms_norm

    asked = _no_compile_allowed(monkeypatch)
    norms = _norms()
    x = torch.randn((1, 3, 64), generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    _through(norms, x)
    assert asked == ["_rms_norm"]  # the control: moshi's own norm asks to be compiled
    asked.clear()
    assert eager_norms(norms) == 2
    y = _through(norms, x)
    expected = x
    with torch.no_grad():
        for norm in norms:
            expected = _rms_norm.__wrapped__(expected, norm.alpha, norm.dtype, norm.eps)
    assert asked == []
    assert torch.equal(y, expected)
    assert all(type(n).__name__ == "EagerRMSNorm" for n in norms)
    assert eager_norms(norms) == 2  # again: the vendor's class subclassed again, not ours
    assert all(type(n).__bases__[0].__name__ == "RMSNorm" for n in norms)


def test_a_personaplex_stream_runs_every_norm_eager() -> None:
    from moshi.modules.transformer import RMSNorm

    from engine.arms import Arm
    from tests.personaplex_small import make_stream

    stream, _ = make_stream(Arm.EAGER)
    try:
        norms = [m for m in stream.ops.lm.modules() if isinstance(m, RMSNorm)]
        assert norms and all(type(m).__name__ == "EagerRMSNorm" for m in norms)
    finally:
        stream.close()
