"""The two ways reading training data ends early: bad input, and data that ran out."""


class DataError(Exception):
    """The data config points at something unusable: a missing file, a bad record, a token id
    the model cannot embed. The message names the config field and the offending file."""


class DataExhausted(Exception):
    """Every window was used once and `data.on_exhausted` is `stop`: the run ends cleanly."""
