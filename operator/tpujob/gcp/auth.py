"""Authorization headers for Google APIs: Application Default Credentials (Workload Identity on
GKE, a key file or gcloud's login elsewhere), or none at all for a local stand-in.

Tokens only ever go into the Authorization header: never into logs, errors or reprs."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from tpujob.gcp.errors import CredentialsRefreshFailed, CredentialsUnavailable

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class Auth(Protocol):
    """What the client asks of an authorization source."""

    def headers(self) -> dict[str, str]:
        """Headers to add to the next request (refreshing the token first if it expired)."""

    def invalidate(self) -> None:
        """Forget the current token (the server answered 401), so the next call refreshes."""


class NoAuth:
    """No Authorization header: for the local Compute stand-in."""

    def headers(self) -> dict[str, str]:
        return {}

    def invalidate(self) -> None:
        pass

    def __repr__(self) -> str:
        return "NoAuth()"


class AdcAuth:
    """Bearer tokens from google-auth credentials, refreshed when expired or after a 401.

    Thread-safe: kopf runs sync handlers in a thread pool that shares one client.
    """

    def __init__(self, credentials: Any):
        self._credentials = credentials
        self._lock = threading.Lock()
        self._stale = False

    @classmethod
    def from_environment(cls, scopes: tuple[str, ...] = (CLOUD_PLATFORM_SCOPE,)) -> AdcAuth:
        """Application Default Credentials. Raises CredentialsUnavailable when there are none."""
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            credentials, _ = google.auth.default(scopes=list(scopes))
        except DefaultCredentialsError as e:
            raise CredentialsUnavailable(
                "no Google Cloud credentials found for the Compute Engine API: on GKE bind the "
                "operator's Kubernetes service account to a Google service account (Workload "
                "Identity); elsewhere set GOOGLE_APPLICATION_CREDENTIALS or run "
                f"`gcloud auth application-default login` ({_first_line(e)})") from None
        return cls(credentials)

    def headers(self) -> dict[str, str]:
        with self._lock:
            if self._stale or not self._credentials.valid:
                self._refresh()
            return {"Authorization": f"Bearer {self._credentials.token}"}

    def invalidate(self) -> None:
        with self._lock:
            self._stale = True

    def _refresh(self) -> None:
        import google.auth.transport.requests
        from google.auth.exceptions import RefreshError, TransportError

        try:
            self._credentials.refresh(google.auth.transport.requests.Request())
        except TransportError as e:
            raise CredentialsRefreshFailed(
                f"could not refresh the Google Cloud access token: {_first_line(e)}") from None
        except RefreshError as e:
            raise CredentialsUnavailable(
                "the Google Cloud credentials were refused when refreshing the access token "
                f"(check the Workload Identity binding): {_first_line(e)}") from None
        self._stale = False

    def __repr__(self) -> str:
        return f"AdcAuth({type(self._credentials).__name__})"


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
