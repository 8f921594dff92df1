"""Audit mode of a Token2Wav model (paper §3.6): the shadow auditor on the flow stream's carry.

Every retention of the estimator cache under S, SR and SRc is shadowed by the stock
concatenation the declaration states, compared bit for bit and counted, never changing what is
computed. Each period's record carries the counts under ``loop["audit"]`` (or says the arm has
no carry to shadow); a region's first divergence is logged (``duplexcadence.audit``) and
recorded as an ``audit_divergence`` event of its period, and the conversation goes on. Off,
nothing is attached: no extra work.
"""

from __future__ import annotations

import logging
from typing import Any

from adapters.token2wav.declared import CARRY_REGION
from adapters.token2wav.stream import FlowStream
from engine.arms import Arm
from engine.audit import Auditor, AuditReport, Divergence
from engine.carry import RetentionRule
from engine.metrics import Metrics

audit_log = logging.getLogger("duplexcadence.audit")


class CarryAudit:
    """Audit mode of one model (an ``adapters.face.FamilyAudit``): an auditor on the flow's carry.

    :meth:`attach` puts a fresh auditor on the carry (the warm-up gets one, the conversation
    another), checked against the declaration's retention ``declared`` of the carry's region;
    never strict: a divergence is logged and, once ``metrics`` is given, recorded as an
    ``audit_divergence`` event of the period it happened in. :meth:`period` gives a period's
    counts for its record.
    """

    def __init__(self, flow: FlowStream, declared: RetentionRule) -> None:
        self.flow, self.declared = flow, declared
        self.auditor = Auditor()
        self._metrics: Metrics | None = None
        self._seen = (0, 0, 0)

    def attach(self, metrics: Metrics | None = None) -> None:
        """A fresh auditor on the carry from its next write."""
        self._metrics, self._seen = metrics, (0, 0, 0)
        self.auditor = Auditor(on_divergence=self._diverged)
        self.flow.set_auditor(self.auditor, self.declared)

    def header(self) -> dict[str, Any]:
        """What is audited, for the trace header."""
        rule = self.declared
        return {
            "region": CARRY_REGION,
            "arms": [str(a) for a in Arm if a.state_rule],
            "declared": {
                "dim": rule.dim,
                "prompt": rule.prompt,
                "history": rule.history,
                "order": str(rule.order),
            },
            "strict": False,
        }

    def period(self, arm: Arm) -> dict[str, Any]:
        """This period's counts (since the last call) and the conversation's totals."""
        report = self.auditor.report()
        totals = (report.retentions, report.agreements, report.resets)
        retentions, agreements, resets = (t - s for t, s in zip(totals, self._seen, strict=True))
        self._seen = totals
        facts = _audit_counts(report)
        facts.update(
            active=arm.state_rule,
            retentions=retentions,
            agreements=agreements,
            divergences=retentions - agreements,
            resets=resets,
        )
        if not arm.state_rule:
            facts["inactive"] = (
                f"arm {arm} has no state rule: its caches are the stock path's fresh tensors, "
                "no carry retention to shadow"
            )
        return facts

    def totals(self) -> dict[str, Any]:
        """The counts so far (the warm-up's, for the trace header)."""
        return _audit_counts(self.auditor.report())

    def _diverged(self, divergence: Divergence) -> None:
        text = divergence.describe()
        audit_log.warning("audit: %s", text)
        if self._metrics is not None:
            self._metrics.event(
                "audit_divergence",
                op=divergence.region,
                reason="carry diverged from the stock retention",
                detail=text,
            )


def _audit_counts(report: AuditReport) -> dict[str, Any]:
    region = report.regions.get(CARRY_REGION)
    first = report.first_divergence
    return {
        "region": CARRY_REGION,
        "retentions_total": report.retentions,
        "agreements_total": report.agreements,
        "divergences_total": report.divergences,
        "addresses": region.distinct_addresses if region is not None else 0,
        # Lists, not tuples: the record equals what its trace line reads back as.
        "first_divergence": None
        if first is None
        else {k: list(v) if isinstance(v, tuple) else v for k, v in first.to_dict().items()},
    }


def carry_audit(flow: FlowStream) -> CarryAudit:
    """Audit mode's wiring: the carry's region, with its retention as the declaration states it
    at this voice's prompt length (the binding's rule: the auditor checks the carry's in-place
    moves against the stock concatenation the declaration describes)."""
    return CarryAudit(flow, flow.binding.carry)
