"""`jaxdl.memory`: vDNN memory virtualisation (offload / remat policies, planner, report)."""

from jaxdl.memory._abstract import abstract_model
from jaxdl.memory._offload import offload
from jaxdl.memory._planner import BudgetError, Candidate, Plan, plan
from jaxdl.memory._policies import POLICIES, plan_of, policy_of
from jaxdl.memory._report import MemoryReport, report

__all__ = ["POLICIES", "BudgetError", "Candidate", "MemoryReport", "Plan", "abstract_model",
           "offload", "plan", "plan_of", "policy_of", "report"]
