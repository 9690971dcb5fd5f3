"""Data and checkpoint tests: the GCS emulator plugin, shared helpers."""

pytest_plugins = ["tests.support.gcs"]
