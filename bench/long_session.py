"""A long headless conversation through the real command, its resident memory sampled each second.

    python3 bench/long_session.py                                  # 2 hours of talk, ~5 min CPU
    python3 bench/long_session.py --hours 0.1 --out /tmp/l.json    # a quick look

Builds the input on disk first, streamed (``app.demo.write_talk``: the shipped talk, utterances
and pauses, looped for ``--hours``), then runs ``duplexcadence converse --headless`` on it as a
child process: synthetic family, small size, CPU, the simulated clock (periods back to back,
the command's default on files), the WAV and the trace written period by period and exported at
the end, as a user would run it. Every ``--sample-s`` the child's resident set is read (psutil,
else ``/proc``) with the periods its JSONL holds; at its exit ``wait4`` gives the kernel's
high-water mark, which no sampling can miss (the peak is the higher of the two: they count
pages slightly differently). The result JSON (``--out``) holds the environment, the command,
the input's length, the periods, the peak, the resident set after the first minute of
conversation and at its last period, the slope in between and over the last hour (MiB per hour
of conversation, least squares), the bound (600 MB, issue 12) and whether the peak stayed under
it; plus checks that the outputs are whole (the WAV has every period, every
JSONL line parses). Exits 1 when the bound is broken or the command fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.demo import write_talk  # noqa: E402
from bench.env_info import environment  # noqa: E402
from engine.sizes import MIB  # noqa: E402

BOUND_BYTES = 600 * 10**6  # issue 12: "a 2-hour headless conversation stays under 600 MB"
SETTLE_PERIODS = 60  # the first minute of conversation: loading and warm-up are behind it


def rss_bytes(pid: int) -> int | None:
    """The resident set of process ``pid``, or None once it is gone."""
    try:
        import psutil

        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return None
    except ImportError:
        pass
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            line = next(line for line in status if line.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration):
        return None


class LineCounter:
    """Period lines in a growing JSONL, counted from the bytes added since the last look."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.lines = path, 0, 0

    def periods(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return 0
        self.offset += len(chunk)
        self.lines += chunk.count(b"\n")
        return max(0, self.lines - 1)  # the header is the first line


def run_command(argv: list[str], jsonl: Path, sample_s: float) -> dict[str, Any]:
    """Run ``argv``, sampling its resident set; returns the samples, its output and its peak."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=ROOT, text=True)
        t0, counter, samples = time.monotonic(), LineCounter(jsonl), []
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            rss = rss_bytes(child.pid)
            if rss is not None:
                t = round(time.monotonic() - t0, 1)
                samples.append({"t_s": t, "periods": counter.periods(), "rss_mib": _mib(rss)})
            time.sleep(sample_s)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "returncode": child.returncode,
            "wall_s": round(time.monotonic() - t0, 1),
            "peak_rss_mib": _mib(usage.ru_maxrss * 1024),  # Linux: KiB, the whole life
            "stdout": out.read(),
            "stderr_tail": err.read()[-2000:],
            "samples": samples,
        }


def _mib(value: float) -> float:
    return round(value / MIB, 1)


def slope_mib_per_hour(samples: list[dict[str, Any]]) -> float:
    """Least-squares slope of the resident set over periods (one period = one second)."""
    if len(samples) < 2:
        return 0.0
    xs = [s["periods"] / 3600 for s in samples]
    ys = [s["rss_mib"] for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return round(cov / var, 2) if var else 0.0


def conversation_figures(samples: list[dict[str, Any]], periods: int) -> dict[str, Any]:
    """Resident set after the first minute of conversation vs at its last period, and the slope
    in between (the export at the end is counted in the peak, not here)."""
    talking = [s for s in samples if SETTLE_PERIODS <= s["periods"] < periods]
    if not talking:
        return {}
    second_hour = [s for s in talking if s["periods"] >= periods - 3600]
    return {
        "rss_after_first_minute_mib": talking[0]["rss_mib"],
        "rss_at_last_period_mib": talking[-1]["rss_mib"],
        "highest_while_talking_mib": max(s["rss_mib"] for s in talking),
        "slope_mib_per_hour": slope_mib_per_hour(talking),
        "slope_last_hour_mib_per_hour": slope_mib_per_hour(second_hour),
    }


def check_outputs(wav: Path, jsonl: Path, periods: int) -> dict[str, Any]:
    """The WAV holds every period and every JSONL line parses (read line by line)."""
    import soundfile

    info = soundfile.info(str(wav))
    lines = bad = 0
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            lines += 1
            try:
                json.loads(line)
            except json.JSONDecodeError:
                bad += 1
    return {
        "wav_seconds": round(info.frames / info.samplerate, 3),
        "wav_has_every_period": info.frames == periods * info.samplerate,
        "jsonl_lines": lines,
        "jsonl_lines_unparsed": bad,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/long_session_cpu.json")
    parser.add_argument("--hours", type=float, default=2.0, help="length of the input")
    parser.add_argument("--sample-s", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--folder", type=Path, help="keep the files here (default: a temp folder)")
    args = parser.parse_args(argv)
    command = " ".join(["python3", "bench/long_session.py", *(argv or sys.argv[1:])])
    with tempfile.TemporaryDirectory(prefix="dc-long-") as temp:
        folder = args.folder or Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        talk, wav, trace = folder / "talk.wav", folder / "assistant.wav", folder / "trace.json"
        t0 = time.monotonic()
        write_talk(talk, round(args.hours * 3600))
        build_s = round(time.monotonic() - t0, 1)
        cli = [
            sys.executable, "-m", "app.cli", "converse", "--headless", "--input", str(talk),
            "--output", str(wav), "--trace", str(trace), "--family", "synthetic",
            "--device", "cpu", "--model-size", "small", "--quiet", "--force",
        ]  # fmt: skip
        print(f"input {args.hours} h built in {build_s} s; running the command", flush=True)
        ran = run_command(cli, trace.with_suffix(".jsonl"), args.sample_s)
        if ran["returncode"] != 0:
            print(ran["stderr_tail"], file=sys.stderr)
            return 1
        summary = json.loads(ran["stdout"])
        outputs = check_outputs(wav, trace.with_suffix(".jsonl"), summary["periods"])
    sampled = max((s["rss_mib"] for s in ran["samples"]), default=0.0)
    peak = max(ran["peak_rss_mib"], sampled)  # the two count pages slightly differently
    result = {
        **environment(command),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "cli": " ".join(Path(a).name if a.startswith(str(folder)) else a for a in cli[1:]),
        "input_seconds": round(args.hours * 3600),
        "input_build_s": build_s,
        "wall_s": ran["wall_s"],
        "periods": summary["periods"],
        "summary": {k: v for k, v in summary.items() if k not in ("jsonl", "perfetto", "csv")},
        "peak_rss_mib": peak,
        "peak_rss_kernel_mib": ran["peak_rss_mib"],
        "peak_rss_sampled_mib": sampled,
        **conversation_figures(ran["samples"], summary["periods"]),
        "bound_mib": _mib(BOUND_BYTES),
        "passed": peak * MIB < BOUND_BYTES and outputs["wav_has_every_period"],
        "outputs": outputs,
        "samples": ran["samples"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("samples", "summary")}))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
