"""The checkpoint helpers that agree on integers across processes (`broadcast_int`, the step of
the newest checkpoint and how many there are; `tiered._gather_steps`, every process's local
steps) keep all 64 bits: JAX without `jax_enable_x64` turns an int64 into an int32 on the way,
which kept only the low 32 bits of a step or count above 2**31."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.trainer.helpers import clean_env, free_port, process_env
from tpujob_trainer.checkpoint.collectives import from_halves, to_halves

BIG = [2**31, 2**31 + 5, 2**32 + 7, 2**40 + 3, 2**62 + 1]


@pytest.mark.unit
@pytest.mark.parametrize("values", [[0], [-1], [1, 2**31 - 1], BIG, [-2**63, 2**63 - 1]])
def test_an_int64_goes_as_two_uint32_halves_and_comes_back_whole(values):
    halves = to_halves(np.array(values, np.int64))
    assert halves.dtype == np.uint32 and halves.shape == (len(values), 2)
    back = from_halves(halves)
    assert back.dtype == np.int64 and back.tolist() == values
    assert int(from_halves(to_halves(np.int64(values[0])))) == values[0]  # one number too


AGREE = """
import json, sys
import jax
from tpujob_trainer import distributed
from tpujob_trainer.checkpoint.collectives import broadcast_int
from tpujob_trainer.checkpoint.tiered import _gather_steps
from tpujob_trainer.env import ProcessEnv
penv = ProcessEnv.from_env()
distributed.initialize(penv)
me = jax.process_index()
big = json.loads(sys.argv[1])
broadcast = [broadcast_int(v if me == 0 else 1) for v in big + [-1]]
gathered = _gather_steps([s + me for s in big] + [me])
print(json.dumps({"x64": jax.config.jax_enable_x64, "broadcast": broadcast,
                  "gathered": gathered}))
"""


@pytest.mark.integration
def test_two_processes_agree_on_steps_above_32_bits(tmp_path):
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", AGREE, json.dumps(BIG)],
                              env=clean_env(**process_env(i, port, devices=1)), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (0, 1)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    # The last line: JAX's CPU collectives (gloo) print their own lines to stdout first.
    got = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    assert not got[0]["x64"], "the helpers must hold without jax_enable_x64"
    for g in got:
        assert g["broadcast"] == BIG + [-1]  # process 0's values, on both
        # The newest 16 of each process, oldest first.
        assert g["gathered"] == [sorted([s + p for s in BIG] + [p]) for p in (0, 1)]
