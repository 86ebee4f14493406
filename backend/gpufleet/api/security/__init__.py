"""Users, API tokens, signed session values and request limits.

`gpufleet.api.auth` is the front door; the pieces it is built from live here so
that each stays small and can be tested on its own.
"""
