"""EKS bearer tokens, checked the way aws-iam-authenticator's server does: the token is
"k8s-aws-v1." + base64url of a presigned STS GetCallerIdentity URL whose signature covers
`x-k8s-aws-id`; the server checks the URL's parameters and age, replays it to STS with its own
cluster name in that header, and takes the caller's ARN from the answer. The twin's token
authenticator (`authn.py`) then maps the ARN to a Kubernetes identity through the cluster's
access entries (`hyperguard_twin.eks_access`), and kube-apiserver's RBAC decides.

Not emulated: the STS host allow-list (the twin's STS is moto on localhost). Moto does not
check SigV4 signatures, so a token signed for another cluster name is accepted; only a real
STS would refuse it.
"""

from __future__ import annotations

import base64
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

from hyperguard.cluster.eks_token import CLUSTER_ID_HEADER, TOKEN_PREFIX

# EKS accepts a token for 15 minutes after it was signed.
TOKEN_MAX_AGE = timedelta(minutes=15)
FETCH_TIMEOUT_S = 5.0
REQUIRED_PARAMS = (
    "Action",
    "Version",
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)

# fetch(url, headers) -> (HTTP status, body)
Fetch = Callable[[str, Mapping[str, str]], tuple[int, bytes]]

_log = logging.getLogger(__name__)
# STS on localhost must not go through a proxy configured for the outside world.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def urllib_fetch(url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with _OPENER.open(request, timeout=FETCH_TIMEOUT_S) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class EksTokenAuthenticator:
    """EKS bearer tokens for the cluster `cluster_name`, verified by replaying them to STS.

    Accepted tokens are remembered until they are 15 minutes old, so a burst of requests
    with one token costs one STS call. `now` is wall time: tokens are signed with it.
    """

    def __init__(
        self,
        cluster_name: str,
        *,
        fetch: Fetch | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cluster_name = cluster_name
        self._fetch = fetch or urllib_fetch
        self._now = now
        self._cache: dict[str, tuple[str, datetime]] = {}
        self._cache_lock = threading.Lock()
        # Serialises STS calls, so requests racing on a new token wait for the first one's
        # answer instead of each asking STS.
        self._replay_lock = threading.Lock()

    def authenticate(self, token: str) -> str | None:
        now = self._now()
        user = self._cached(token, now)
        if user is not None:
            return user
        presigned = self._presigned(token, now)
        if presigned is None:
            return None
        url, query, expires = presigned
        with self._replay_lock:
            user = self._cached(token, now)
            if user is None:
                user = self._replay(url, query)
                if user is not None:
                    with self._cache_lock:
                        self._cache = {t: e for t, e in self._cache.items() if e[1] > now}
                        self._cache[token] = (user, expires)
        return user

    def _cached(self, token: str, now: datetime) -> str | None:
        with self._cache_lock:
            entry = self._cache.get(token)
        return entry[0] if entry is not None and entry[1] > now else None

    def _presigned(self, token: str, now: datetime) -> tuple[str, dict[str, str], datetime] | None:
        """The token's URL, its query and when the token expires; None when it is not an
        EKS token, or has expired."""
        if not token.startswith(TOKEN_PREFIX):
            return None
        encoded = token.removeprefix(TOKEN_PREFIX)
        try:
            url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except ValueError:  # bad base64 or not UTF-8
            return None
        parts = urlsplit(url)
        # A token is the caller's data: never let it make the server open a file.
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return None
        values = parse_qs(parts.query, keep_blank_values=True)
        if any(len(values.get(name, [])) != 1 for name in REQUIRED_PARAMS):
            return None
        query = {name: found[0] for name, found in values.items()}
        signed = query["X-Amz-SignedHeaders"].lower().split(";")
        if query["Action"] != "GetCallerIdentity" or CLUSTER_ID_HEADER not in signed:
            return None
        try:
            signed_at = datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            return None
        expires = signed_at + TOKEN_MAX_AGE
        return (url, query, expires) if expires > now else None

    def _replay(self, url: str, query: Mapping[str, str]) -> str | None:
        # Moto's server picks a backend from the credential scope of an Authorization
        # header and takes a presigned GET (which has none) for S3; restating the URL's
        # signature as a header routes the replay to STS. Real STS would refuse a request
        # signed twice, which is why this authenticator is the twin's and no other.
        authorization = (
            f"{query['X-Amz-Algorithm']} Credential={query['X-Amz-Credential']}, "
            f"SignedHeaders={query['X-Amz-SignedHeaders']}, "
            f"Signature={query['X-Amz-Signature']}"
        )
        headers = {CLUSTER_ID_HEADER: self.cluster_name, "Authorization": authorization}
        try:
            status, body = self._fetch(url, headers)
        except Exception as error:
            _log.warning("STS replay of an EKS token failed: %s", error)
            return None
        if status != 200:
            _log.info("STS refused an EKS token (HTTP %s)", status)
            return None
        try:
            arn = ElementTree.fromstring(body).find(".//{*}GetCallerIdentityResult/{*}Arn")
        except ElementTree.ParseError:
            return None
        return arn.text.strip() if arn is not None and arn.text else None
