"""MaxText's mesh and batch settings read from a job's own command and args, so that a MaxText
run gets the same pre-flight checks as the built-in trainer. Pure: words in, settings out.

MaxText takes `key=value` overrides after its config file (`ici_fsdp_parallelism=16`,
`per_device_batch_size=1`); xpk passes the whole command as one shell string
(`bash -c "python3 -m maxtext.train ... ici_fsdp_parallelism=16"`), so every word of every
command and argument is split the way a shell would and read. MaxText's defaults
(`src/maxtext/configs/base.yml`): `ici_fsdp_parallelism: -1`, `dcn_data_parallelism: -1`,
every other axis 1, `gradient_accumulation_steps: 1`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

# tpujob's mesh axes, which the topology check knows; MaxText has more (stage, sequence,
# fsdp_transpose, tensor_transpose, ...): a run that sets one of those above 1 is not checked.
CHECKED_AXES = ("data", "fsdp", "context", "tensor", "expert")
_SETTING = re.compile(r"^(?:--)?(ici|dcn)_([a-z_]+?)_parallelism=(-?[0-9]+)$")
_BATCH = re.compile(r"^(?:--)?(per_device_batch_size|gradient_accumulation_steps)=(\S+)$")


@dataclass(frozen=True)
class MaxTextSettings:
    """What a command line says about MaxText's mesh and batch (MaxText's defaults filled in:
    `read_maxtext_settings` makes them)."""

    found: bool                              # any MaxText mesh or batch setting at all
    ici: dict[str, int]
    dcn: dict[str, int]
    unchecked: dict[str, int]                # e.g. {"ici_pipeline": 2}
    per_device_batch_size: float | None
    grad_accum: int
    words: tuple[str, ...]                   # the settings as written, for messages


def _words(command: Iterable[str]) -> list[str]:
    out: list[str] = []
    for part in command:
        try:
            out += shlex.split(part)
        except ValueError:  # unbalanced quotes: read it word by word
            out += part.split()
    return out


def read_maxtext_settings(command: Iterable[str]) -> MaxTextSettings:
    """The MaxText settings in a command line (command + args). Raises ValueError for a
    setting whose value is not a number, naming it."""
    ici: dict[str, int] = {"fsdp": -1}
    dcn: dict[str, int] = {"data": -1}
    unchecked: dict[str, int] = {}
    batch: float | None = None
    accum = 1
    words: list[str] = []
    for word in _words(command):
        m = _SETTING.match(word)
        if m:
            kind, axis, size = m.group(1), m.group(2), int(m.group(3))
            words.append(word)
            if axis in CHECKED_AXES:
                (ici if kind == "ici" else dcn)[axis] = size
            elif size != 1:
                unchecked[f"{kind}_{axis}"] = size
            continue
        b = _BATCH.match(word)
        if b:
            words.append(word)
            try:
                if b.group(1) == "per_device_batch_size":
                    batch = float(b.group(2))
                else:
                    accum = int(b.group(2))
            except ValueError:
                raise ValueError(f"{word}: {b.group(1)} must be a number") from None
    return MaxTextSettings(found=bool(words), ici=ici, dcn=dcn, unchecked=unchecked,
                           per_device_batch_size=batch, grad_accum=accum, words=tuple(words))
