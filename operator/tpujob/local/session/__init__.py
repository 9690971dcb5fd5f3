"""Local mode assembled: the embedded API server, a GCS emulator, the operator and the local
executor started as one (`LocalCluster`), and what `tpujob local run` / `tpujob local up` do
with it (`run_file`, `serve`)."""

from .cluster import LocalCluster, LocalSettings
from .run import RunOptions, run_file, serve

__all__ = ["LocalCluster", "LocalSettings", "RunOptions", "run_file", "serve"]
