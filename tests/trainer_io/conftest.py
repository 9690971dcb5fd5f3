"""Data and checkpoint tests. The GCS emulator fixtures come from tests/support/gcs.py,
registered for every suite in tests/conftest.py (pytest only honours plugins declared there)."""
