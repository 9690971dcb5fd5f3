"""Starting the operator: the API client configuration (kubeconfig or in-cluster), and a runner
that keeps an operator in a background thread with its own event loop (local mode, tests)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

import yaml
from kubernetes import client, config

from tpujob.controller.operator import Operator

log = logging.getLogger("tpujob.operator")


def load_api_config(kubeconfig: str | os.PathLike | None = None, context: str | None = None
                    ) -> client.Configuration:
    """In a pod with no kubeconfig given: the pod's service account. Otherwise the kubeconfig
    (the argument, else $KUBECONFIG, else ~/.kube/config)."""
    cfg = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and \
            not os.environ.get("KUBECONFIG"):
        config.load_incluster_config(client_configuration=cfg)
        return cfg
    path = kubeconfig or os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config"
    config.load_kube_config(config_file=str(path), context=context, client_configuration=cfg)
    if _has_static_credentials(str(path), context):
        # The client's hook would load the kubeconfig's user again before every request (about
        # a twentieth of the operator's CPU in a burst) for credentials that never change.
        cfg.refresh_api_key_hook = None
    return cfg


def _has_static_credentials(path: str, context: str | None) -> bool:
    """Whether the context's user has a fixed token or certificate (no exec plugin, auth
    provider or token file, whose credentials the client refreshes)."""
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c["name"] == context), active) if context \
            else active
        user_name = chosen["context"].get("user")
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
        user = next((u.get("user") or {} for u in doc.get("users") or []
                     if u.get("name") == user_name), None)
    except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError, config.ConfigException):
        return False
    return user is not None and not {"exec", "auth-provider", "tokenFile"} & set(user)


class OperatorThread:
    """Runs `operator` in a daemon thread until `stop()`.

    >>> with OperatorThread(Operator(settings, load_api_config("kubeconfig"))) as op:
    ...     ...
    """

    def __init__(self, operator: Operator):
        self.operator = operator
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _main(self) -> None:
        try:
            asyncio.run(self.operator.run(stop_flag=self._stop, ready_flag=self._ready))
        except BaseException as err:  # reported by start()/stop()
            self.error = err
            log.exception("operator stopped with an error")
        finally:
            self._ready.set()

    def start(self, timeout: float = 30.0) -> OperatorThread:
        self._thread = threading.Thread(target=self._main, name="tpujob-operator", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the operator did not start within {timeout:.0f} s")
        if self.error is not None:
            raise RuntimeError(f"the operator failed to start: {self.error}") from self.error
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> OperatorThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
