"""Shared test support: fixtures and servers the suites start."""
