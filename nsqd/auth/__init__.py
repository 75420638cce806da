"""nsqd's auth-http protocol (``--auth-http-address``), shared by the TCP and HTTP shells."""

from .client import (
    ACCEPT,
    PERMISSIONS,
    AuthClient,
    AuthError,
    Authorization,
    AuthState,
    parse_auth_reply,
)

__all__ = [
    "ACCEPT",
    "PERMISSIONS",
    "AuthClient",
    "AuthError",
    "AuthState",
    "Authorization",
    "parse_auth_reply",
]
