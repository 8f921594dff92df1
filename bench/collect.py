"""Fold a GPU run's outputs (env.json, junit XML, the tests' JSON lines) into one summary JSON."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def summarize(out: Path) -> dict[str, object]:
    """Pass/fail per GPU test plus the figures the tests recorded, with the run's environment."""
    summary: dict[str, object] = json.loads((out / "env.json").read_text())
    tests: dict[str, str] = {}
    for junit in sorted(out.glob("gpu_tests*.xml")):  # one file per process of tests
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            verdict = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    verdict = tag
            tests[name] = verdict
    summary["tests"] = tests
    lines = out / "gpu_tests.jsonl"
    summary["records"] = (
        [json.loads(line) for line in lines.read_text().splitlines() if line.strip()]
        if lines.exists()
        else []
    )
    return summary


if __name__ == "__main__":
    print(json.dumps(summarize(Path(sys.argv[1])), indent=2))
