"""Host memory checked before a large model loads on the CPU (issue 27, "Deliver" 3).

Each child runs under a forced small limit, ``ulimit -v`` (``RLIMIT_AS``, 3 GiB, of which
torch's import maps about half): the full Token2Wav (its declared stock envelope and workspace
alone, 2.5 GiB, before its weights are counted) and MiniCPM-o 4.5 (its 2-GiB headroom alone) are
refused in one line with the numbers, before anything is built or any checkpoint code runs, and
nothing is written. The count with the weights (built on the meta device) is
``tests/test_token2wav_host.py``'s.
"""

from __future__ import annotations

from pathlib import Path

from app import cli
from tests.hostile.child import cli as run_cli
from tests.hostile.child import one_line_error, run


def test_the_full_token2wav_on_the_cpu_is_refused_under_a_small_limit(tmp_path: Path) -> None:
    result = run_cli(
        "synth", "--voice-frames", "40", "--seconds", "1", "--device", "cpu", "--arm", "eager",
        "--wav", str(tmp_path / "x.wav"), timeout=120,
    )  # fmt: skip
    line = one_line_error(
        result,
        "Token2Wav (full) needs at least",
        "GiB stock envelope (its declaration's)",
        "and its weights",
        "its address-space limit (ulimit -v) leaves",
        "choose the small model size",
    )
    assert result.returncode == cli.EXIT_USAGE, line
    assert list(tmp_path.iterdir()) == []


MINICPMO45 = """
from pathlib import Path
from adapters.face import FamilyError
from adapters.minicpmo45.folder import check_folder
from adapters.registry import family
from tests.test_minicpmo45_folder import make_folder, request

minicpmo45 = family("minicpmo45")
req = request(make_folder(Path("ckpt")), device="cpu", model_size="small")
try:
    minicpmo45._check_memory(req, minicpmo45._decoder_request(req), check_folder(req.checkpoint))
except FamilyError as error:
    sys.exit(f"{error.setting}: {error}")
"""


def test_minicpmo45_on_the_cpu_is_refused_under_a_small_limit(tmp_path: Path) -> None:
    result = run(MINICPMO45, cwd=tmp_path, timeout=120)
    one_line_error(
        result, "device: MiniCPM-o 4.5 needs about", "GiB headroom", "ulimit -v", "CUDA GPU"
    )
