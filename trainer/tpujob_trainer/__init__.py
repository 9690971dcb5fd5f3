"""The tpujob trainer: a small, fast MaxText-like JAX trainer.

Importing this package (or `tpujob_trainer.config`) never imports JAX: the operator validates a
job's trainer config with the same schema before anything is launched.
"""
