"""Point every GCS client (gcsfs, tensorstore, google-cloud-storage) at a GCS emulator.

Set before the first `gs://` access, in this process and (through `os.environ`) its children.
Used by the tests and by local mode; never on a real cluster.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping


def build_gcs_emulator_env(url: str) -> dict[str, str]:
    """The variables that send gcsfs, tensorstore (Orbax) and google-cloud-storage to `url`."""
    url = url.rstrip("/")
    return {
        "STORAGE_EMULATOR_HOST": url,          # gcsfs, google-cloud-storage
        "TENSORSTORE_GCS_HTTP_URL": url,       # tensorstore, which Orbax writes arrays with
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "x",  # tensorstore: skip looking for credentials
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",  # gcsfs: no hierarchical-namespace probe
    }


def set_gcs_emulator_env(url: str, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set `build_gcs_emulator_env(url)` in `environ` (default: this process); returns what was set."""
    env = build_gcs_emulator_env(url)
    (os.environ if environ is None else environ).update(env)
    return env
