"""Sessions' notebooks: served from an origin of their own, never the dashboard's.

A session's notebook listens on a loopback port of its GPU host with a token
only gpufleet knows. ``serve``'s second listener (:mod:`.origin`, on
``GPUFLEET_SESSIONS_PORT``) lets the session's owner and admins in with a
ticket the dashboard made (:mod:`.passes`), adds the token itself, and
forwards HTTP (every method, streamed both ways) and WebSockets (the
kernels' channels). The dashboard's own listener serves no notebook
(:mod:`.middleware`). A notebook on another host is reached through that
host's relay (:mod:`.relay`); see ``docs/notebooks.md``.
"""

from gpufleet.api.proxy.middleware import NotebooksElsewhere
from gpufleet.api.proxy.origin import NotebookOrigin

__all__ = ["NotebookOrigin", "NotebooksElsewhere"]
