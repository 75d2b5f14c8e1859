"""Who may see what: Airflow's own login, and its auth manager's rights on each DAG.

A plugin's FastAPI app is served by Airflow's api-server without any authentication of its
own. Every route of the agora app depends on :func:`current_user` (set once for the whole
app, so a new route cannot forget it), which resolves the caller exactly as Airflow's REST
API does, with :func:`airflow.api_fastapi.core_api.security.get_user`: a JWT in an
``Authorization: Bearer`` header (from ``POST /auth/token``), else the ``_token`` cookie that
Airflow's UI sets at login (which a page embedded in Airflow's UI carries). A missing,
invalid or expired token is a 401.

Rights come from the auth manager in force (``airflow.api_fastapi.app.get_auth_manager()``):
``is_authorized_dag(method="GET")`` to see a DAG's plan, traces and front, ``"PUT"`` (edit
rights on the DAG) to queue its re-optimization, and ``get_authorized_dag_ids`` to list only
the DAGs a user may read. No right is a 403.

Re-optimizing is a POST with a JSON body. A browser sends Airflow's cookie with any
same-site request, so a POST authenticated by that cookie must also carry the
``X-Agora-CSRF`` header: an HMAC of the user's id under ``[api] secret_key`` that the pages
embed and a page of another site can neither read nor send (a custom header needs a
CORS preflight). A Bearer header is never sent by a browser on its own, so API clients
need no CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from functools import cache
from typing import Annotated, Any, Literal

from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

Method = Literal["GET", "PUT"]
User = Any  # airflow.api_fastapi.auth.managers.models.base_user.BaseUser (Airflow ships no type stubs)

CSRF_HEADER = "X-Agora-CSRF"

bearer = HTTPBearer(
    auto_error=False,
    description="An Airflow JWT from POST /auth/token; in a browser, the _token cookie of Airflow's UI instead.",
)


def not_authenticated(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def forbidden(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, detail)


async def current_user(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> User:
    """The caller, authenticated by Airflow's auth manager; 401 without a valid token."""
    from airflow.api_fastapi.core_api.security import get_user

    try:
        return await get_user(request, None, credentials)
    except HTTPException as exc:
        if exc.status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
            raise not_authenticated(f"log in to Airflow first ({exc.detail})") from None
        raise


UserDep = Annotated[User, Depends(current_user)]
DagIdPath = Annotated[
    str,
    Path(description="An Airflow DAG id: Unicode letters and digits, '_', '.' and '-' (at most 250)."),
]


def valid_dag_id(dag_id: str) -> str:
    """The path's DAG id if Airflow would accept it (the plan store's rule); else 404 saying why."""
    from agora_optimizer.plans.store import InvalidDagIdError, check_dag_id

    try:
        return check_dag_id(dag_id)
    except InvalidDagIdError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def is_authorized_dag(user: User, dag_id: str, method: Method) -> bool:
    """The auth manager's answer for this DAG (and its team, where Airflow runs several)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return bool(_auth_manager().is_authorized_dag(method=method, details=details, user=user))


def authorize_dag(user: User, dag_id: str, method: Method) -> None:
    if not is_authorized_dag(user, dag_id, method):
        verb = "read" if method == "GET" else "edit"
        raise forbidden(f"you may not {verb} DAG {dag_id}")


def authorized_dag_ids(user: User, method: Method) -> set[str]:
    """The DAGs (of Airflow's database) the user may read (GET) or edit (PUT)."""
    return {str(dag_id) for dag_id in _auth_manager().get_authorized_dag_ids(user=user, method=method)}


def readable_dag(dag_id: DagIdPath, user: UserDep) -> str:
    """The path's DAG id, once the user may read that DAG."""
    authorize_dag(user, valid_dag_id(dag_id), "GET")
    return dag_id


def editable_dag(dag_id: DagIdPath, user: UserDep) -> str:
    """The path's DAG id, once the user may edit that DAG."""
    authorize_dag(user, valid_dag_id(dag_id), "PUT")
    return dag_id


ReadableDag = Annotated[str, Depends(readable_dag)]
EditableDag = Annotated[str, Depends(editable_dag)]


@cache
def _fallback_key() -> bytes:
    return secrets.token_bytes(32)


def _csrf_key() -> bytes:
    from airflow.configuration import conf

    configured = conf.get("api", "secret_key", fallback="")
    return configured.encode() if configured else _fallback_key()  # one process: without a shared secret


def csrf_token(user: User) -> str:
    """The user's CSRF token: it changes with ``[api] secret_key`` and differs between users."""
    message = f"agora-reoptimize:{user.get_id()}".encode()
    return hmac.new(_csrf_key(), message, hashlib.sha256).hexdigest()


def check_csrf(request: Request, user: User) -> None:
    """Refuse a cookie-authenticated request without the user's CSRF header (403)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token:
        return
    sent = request.headers.get(CSRF_HEADER, "")
    if not sent or not hmac.compare_digest(sent, csrf_token(user)):
        raise forbidden(f"missing or wrong {CSRF_HEADER} header (reload the agora page)")
