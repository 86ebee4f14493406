"""The guards every request passes before a route, and the pieces of sign-in.

`gpufleet.api.app` stacks the guards (host names, body sizes, NUL characters,
the auth gate); `gpufleet.api.auth` authenticates with the pieces here
(origins, signed values, rate limits, the serve policy). Users and tokens
themselves are the domain of `gpufleet.users`.
"""
