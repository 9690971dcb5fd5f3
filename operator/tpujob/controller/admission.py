"""The admission review: the operator's pre-flight validation, offered to the API server as a
validating webhook so `kubectl apply` refuses an impossible job at once, and refuses a change a
running job cannot take. Pure; the kopf handler only raises what this returns."""

from __future__ import annotations

from typing import Any

from tpujob.api.resource import InvalidJobError, load_spec
from tpujob.api.status import Phase
from tpujob.builders.fingerprint import changed_fields, encode_fingerprint
from tpujob.validation import validate_job

ACTIVE_PHASES = {Phase.STARTING.value, Phase.RUNNING.value, Phase.RESTARTING.value}


def review(new: dict[str, Any], old: dict[str, Any] | None = None) -> str | None:
    """None to admit; otherwise why not, naming the field and what would be valid."""
    verdict = validate_job(new)
    if not verdict.valid:
        return verdict.message
    if not old:
        return None
    phase = (old.get("status") or {}).get("phase")
    new_spec = verdict.job.spec
    if phase not in ACTIVE_PHASES or new_spec.suspend:
        return None
    try:
        old_spec = load_spec(old.get("spec") or {})
    except InvalidJobError:
        return None
    if old_spec.suspend:
        return None
    before, after = old_spec.scheduling.priority, new_spec.scheduling.priority
    if before != after and (before is None or after is None):
        # Kueue changes a running job's WorkloadPriorityClass, but refuses adding one to an
        # admitted job and removing one (its jobframework ValidateUpdateForWorkloadPriorityClassName).
        return (f"spec.scheduling.priority cannot be {'added' if before is None else 'removed'} "
                f"while the job is {phase} (Kueue refuses it for an admitted job); "
                + ("set spec.suspend to true in the same change" if before is None else
                   "set it to another WorkloadPriorityClass"))
    changed = changed_fields(new_spec, encode_fingerprint(old_spec))
    if not changed:
        return None
    return (f"{', '.join(changed)} cannot change while the job is {phase}: set spec.suspend to "
            "true in the same change (the run resumes from its checkpoint when it is set back "
            "to false), or delete and re-create the job")
