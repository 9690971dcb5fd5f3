"""Slow hosts named on a real run: the trainer as 2 JAX processes of a v6e-8 in local mode, every
process printing its host reports, the operator reading both pods' logs. Process 1 slowed so
that every step of the job takes 20% longer (TPUJOB_FAULT_STEP_SLOWDOWN=0.2, its own host work)
is named in status, the SlowHost condition and a Warning Event within 50 steps of its steady
steps; the same job unslowed flags no host."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import TINY, unique

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
STEPS = 200
WARMUP_AND_MINIMUM = 2 + 10   # the scores' warm-up and the steady steps they need
SLOW = "slice-0/host-1"


def job(output: str, *env: tuple[str, str]) -> dict:
    config = TINY | {"train": TINY["train"] | {"steps": STEPS},
                     "checkpoint": {"every": 1000, "keep": 1}}
    return {"slice": "v6e-8", "image": "trainer:1", "output": output,
            "trainer": {"config": config},
            "env": [{"name": n, "value": v} for n, v in
                    (("TPUJOB_HOST_REPORT_INTERVAL_S", "0.2"), *env)],
            "parallelism": {"ici": {"fsdp": -1}}, "data": {"kind": "synthetic"},
            "restartPolicy": {"maxRestarts": 0}}


def watch(local, name: str) -> tuple[list[dict], dict]:
    """Every status seen while the job ran (as often as the test can look), and the last."""
    seen: list[dict] = []

    def done(status: dict) -> bool:
        seen.append(status)
        return status.get("phase") in ("Succeeded", "Failed")

    final = local.wait(name, done, timeout=240, message="the job to finish")
    return seen, final["status"]


def test_a_host_slowed_20_percent_is_named_within_50_steps(local):
    name = unique("slow")
    local.apply(name, job(f"gs://tpujob-e2e/{name}", ("TPUJOB_FAULT_STEP_SLOWDOWN", "0.2"),
                          ("TPUJOB_FAULT_PROCESSES", "1")))
    seen, final = watch(local, name)
    assert final["phase"] == "Succeeded", final
    named = [s for s in seen if (s.get("hosts") or {}).get("slowHost")]
    assert named, f"never named; last hosts: {final.get('hosts')}"
    first = named[0]
    step = first["progress"]["step"]
    print(f"named at step {step}: {first['hosts']['message']}")
    assert {s["hosts"]["slowHost"] for s in named} == {SLOW}
    assert step <= WARMUP_AND_MINIMUM + 50
    assert first["hosts"]["display"].startswith(f"{SLOW} 0.")
    condition = next(c for c in first["conditions"] if c["type"] == "SlowHost")
    assert condition["status"] == "True" and SLOW in condition["message"]
    local.wait_events(name, "SlowHost")
    warnings = [e for e in local.events(name) if e["reason"] == "SlowHost"]
    assert warnings and all(SLOW in e["message"] for e in warnings)


def test_the_same_job_unslowed_flags_no_host(local):
    name = unique("even")
    local.apply(name, job(f"gs://tpujob-e2e/{name}"))
    seen, final = watch(local, name)
    assert final["phase"] == "Succeeded", final
    scored = [s["hosts"] for s in seen if (s.get("hosts") or {}).get("scored")]
    assert scored, "the hosts were never scored"
    assert not [h for h in scored if h.get("slowHost")]
    lowest = min(min(x["score"] for x in h["slowest"]) for h in scored)
    print(f"lowest score {lowest} over {len(scored)} looks")
    assert "SlowHost" not in [e["reason"] for e in local.events(name)]
