"""The console under ``/console``: the login, the static files, and every registered page behind the
admin-key gate (gateway.console.access).

``mount_console(app, gateway, admin_key_env)`` is called by ``gateway.api.app.create_app`` when the
config enables the console (``console.enabled``); the pages are ``gateway.console.pages.PAGES``.
"""

from __future__ import annotations

from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from gateway.assembly.runtime import Gateway
from gateway.console.access import COOKIE, SESSION_S, ConsoleAccess
from gateway.console.context import ConsoleContext
from gateway.console.pages import PAGES
from gateway.console.views import PREFIX, SECURITY_HEADERS, STATIC, NavItem, Views

# The login form's body is one key and one path: anything longer is not a login.
_LOGIN_BODY_BYTES = 4096


class ConsoleDenied(Exception):
    """A console request the gate turned away, with the response that says so."""

    def __init__(self, response: Response):
        super().__init__("console access denied")
        self.response = response


def mount_console(app: FastAPI, gateway: Gateway, admin_key_env: str | None) -> None:
    """Serve the console of ``gateway`` on ``app`` (the gateway must be recording: ``gateway.console``)."""
    recorder = gateway.console
    assert recorder is not None, "the console is served only when the gateway records requests"
    access = ConsoleAccess(gateway.shared.authenticator, admin_key_env or "CASCADE_ADMIN_KEY")
    views = Views(nav=[NavItem(page.title, page.path) for page in PAGES])
    context = ConsoleContext(gateway, recorder.store, views)

    async def gate(request: Request) -> None:
        verdict = access.verdict(
            request.scope, request.headers.get("authorization"), request.cookies.get(COOKIE)
        )
        request.state.console_access = verdict
        if verdict == "refused":
            raise ConsoleDenied(_refused(request, views, access))
        if verdict == "login":
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            login = f"{PREFIX}/login?next={quote(target)}"
            if request.headers.get("hx-request"):
                raise ConsoleDenied(Response(status_code=401, headers={"hx-redirect": login}))
            raise ConsoleDenied(RedirectResponse(login, status_code=303, headers=SECURITY_HEADERS))

    @app.exception_handler(ConsoleDenied)
    async def denied(request: Request, error: ConsoleDenied) -> Response:
        return error.response

    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="console-static")
    app.include_router(_session_routes(access, views))
    for page in PAGES:
        app.include_router(page.routes(context), prefix=PREFIX, dependencies=[Depends(gate)])
    home = APIRouter()

    @home.get(PREFIX, include_in_schema=False)
    @home.get(f"{PREFIX}/", include_in_schema=False)
    async def console_home() -> Response:
        return RedirectResponse(f"{PREFIX}{PAGES[0].path}", status_code=303)

    app.include_router(home)


def _refused(request: Request, views: Views, access: ConsoleAccess) -> HTMLResponse:
    return views.page(request, "refused.html", title="Console refused", status=403, reason=access.refusal())


def _session_routes(access: ConsoleAccess, views: Views) -> APIRouter:
    """``/console/login`` (the form and its POST) and ``/console/logout``."""
    router = APIRouter(prefix=PREFIX)

    @router.get("/login", response_class=HTMLResponse)
    async def login_form(request: Request, next: str = "") -> Response:
        verdict = access.verdict(request.scope, None, request.cookies.get(COOKIE))
        if verdict == "refused":
            return _refused(request, views, access)
        if verdict in ("admin", "open_loopback"):
            return RedirectResponse(_safe_next(next), status_code=303)
        return views.page(request, "login.html", title="Sign in", next=_safe_next(next), failed=False)

    @router.post("/login", response_class=HTMLResponse)
    async def login(request: Request) -> Response:
        if not access.authenticator.has_admin_key:
            return _refused(request, views, access)
        body = await request.body()
        form = parse_qs(body[:_LOGIN_BODY_BYTES].decode("utf-8", "replace"))
        key, target = (form.get("key") or [""])[0], _safe_next((form.get("next") or [""])[0])
        if not key or not access.key_is_admin(key):
            return views.page(request, "login.html", title="Sign in", status=401, next=target, failed=True)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            access.new_session(),
            max_age=SESSION_S,
            path=PREFIX,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @router.post("/logout")
    async def logout() -> Response:
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return response

    return router


def _safe_next(target: str) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if target.startswith(f"{PREFIX}/") and not target.startswith("//") and "\\" not in target:
        return target
    return f"{PREFIX}{PAGES[0].path}"
