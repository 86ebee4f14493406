"""The notebook proxy: ``/sessions/{id}/`` reaches a session's Jupyter server through gpufleet.

A session's notebook listens on a loopback port of its GPU host with a token
only gpufleet knows. The proxy lets the session's owner and admins in (the
same sign-in, Host and Origin checks as the API), adds the token itself, and
forwards HTTP (every method, streamed both ways) and WebSockets (the kernels'
channels). A notebook on another host is reached through that host's relay
(:mod:`gpufleet.api.proxy.relay`); see ``docs/sessions.md``.
"""

from gpufleet.api.proxy.middleware import SessionProxy

__all__ = ["SessionProxy"]
