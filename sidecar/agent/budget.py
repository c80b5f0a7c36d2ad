"""Latency budgets: what each stage of a run may still spend, and which stages overran.

A profile may declare a budget for the whole run and for three kinds of stage: model
calls, tool calls (each step's wall time, so concurrent calls count once) and everything
else. :class:`RunBudget` keeps one run's account: the loop tells it what each model call
and each step's tool calls cost, asks it for the deadline of the next call, and asks it
at every stage boundary which stages have newly overrun. Each overrun is reported once
per stage and run; the profile's policy decides what the loop does next:

========  ================================================  ==============================
policy    a call's deadline is                              after an overrun the run
========  ================================================  ==============================
continue  the run's deadline (the caller's)                 goes on
answer    also capped by what is left of the total budget   makes one last model call with
          and of the call's stage budget                    tool calls off, then stops
stop      as for ``answer``                                 stops, without an answer
========  ================================================  ==============================

Why ``continue`` does not shorten calls: a budget that cuts a call short and then lets the
run go on would hand every later call of that stage no time at all. Under ``continue``
budgets are targets to measure against, and only the caller's deadline is enforced.
"""

from __future__ import annotations

import time

from sidecar.config import BudgetConfig
from sidecar.types import BudgetOverrun, BudgetPolicy, BudgetStage

__all__ = ["RunBudget"]

# Event loops fire a timer up to their clock's resolution early (uvloop rounds to whole
# milliseconds), so a call cut off at its budget can be seen to have spent a hair less.
_TIMER_SLACK = 0.002


_POLICIES = {
    "continue": BudgetPolicy.CONTINUE,
    "answer": BudgetPolicy.ANSWER,
    "stop": BudgetPolicy.STOP,
}


class RunBudget:
    """One run's latency budget account.

    Args:
        config: The profile's budget; at least one budget is set.
        started: ``time.monotonic()`` value when the run's clock started (the request
            arrived), so the total budget counts queueing too.
        deadline: ``time.monotonic()`` value of the run's own deadline (the caller's);
            no call is ever given more.
    """

    __slots__ = (
        "_budgets",
        "_deadline",
        "_model",
        "_reported",
        "_tools",
        "_total_deadline",
        "enforced",
        "model_spent",
        "policy",
        "tools_spent",
    )

    def __init__(self, config: BudgetConfig, *, started: float, deadline: float) -> None:
        self.policy = _POLICIES[config.policy]
        self.enforced = self.policy is not BudgetPolicy.CONTINUE
        self._budgets = tuple(
            (stage, seconds)
            for stage, seconds in (
                (BudgetStage.TOTAL, config.total),
                (BudgetStage.MODEL, config.model),
                (BudgetStage.TOOLS, config.tools),
                (BudgetStage.OTHER, config.other),
            )
            if seconds is not None
        )
        self._model = config.model
        self._tools = config.tools
        self._deadline = deadline
        self._total_deadline = (
            min(deadline, started + config.total) if config.total is not None else deadline
        )
        self._reported: set[BudgetStage] = set()
        self.model_spent = 0.0
        """Seconds of model calls so far."""
        self.tools_spent = 0.0
        """Seconds of tool steps so far (each step's wall time)."""

    def deadline(self, stage: BudgetStage) -> float:
        """The ``time.monotonic()`` deadline of the next call of ``stage`` (MODEL or TOOLS)."""
        if not self.enforced:
            return self._deadline
        budget, spent = (
            (self._model, self.model_spent)
            if stage is BudgetStage.MODEL
            else (self._tools, self.tools_spent)
        )
        if budget is None:
            return self._total_deadline
        return min(self._total_deadline, time.monotonic() + max(0.0, budget - spent))

    def overruns(self, step: int, elapsed: float) -> list[BudgetOverrun]:
        """Stages at or over their budget that were not reported before.

        A stage whose budget is used up counts as overrun: a call cut off at its budget
        has spent exactly what it was allowed and did not finish.

        Args:
            step: The current step, for the report.
            elapsed: Seconds since the run's clock started.
        """
        found: list[BudgetOverrun] = []
        for stage, budget in self._budgets:
            if stage in self._reported:
                continue
            if stage is BudgetStage.TOTAL:
                spent = elapsed
            elif stage is BudgetStage.MODEL:
                spent = self.model_spent
            elif stage is BudgetStage.TOOLS:
                spent = self.tools_spent
            else:
                spent = max(0.0, elapsed - self.model_spent - self.tools_spent)
            if spent >= budget - _TIMER_SLACK:
                self._reported.add(stage)
                found.append(
                    BudgetOverrun(
                        stage=stage, budget=budget, spent=spent, policy=self.policy, step=step
                    )
                )
        return found
