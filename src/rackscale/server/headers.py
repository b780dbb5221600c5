"""Security headers on every answer: the dashboard is an operator's page with a drain form, so
no other site may frame it (clickjacking), no browser may sniff a JSON answer into HTML, and a
page runs only its own scripts (a script smuggled in through text from the store does not)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# An answer that is not a page (JSON, metrics, the event stream) loads nothing at all.
API_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def page_policy(nonce: str) -> str:
    """A dashboard page's policy: its scripts by nonce, its inline styles (the bars' widths are
    style attributes), requests to this server only, no frames, no plugins, no forms elsewhere."""
    return (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
            "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'")


class SecurityHeaders:
    """Adds HEADERS to every HTTP answer, and API_POLICY to one that set no policy itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                have = {name.lower() for name, _ in headers}
                headers += [(k.encode(), v.encode()) for k, v in HEADERS.items()
                            if k.encode() not in have]
                if b"content-security-policy" not in have:
                    headers.append((b"content-security-policy", API_POLICY.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
