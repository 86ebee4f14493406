"""The users domain: people, their roles, and the API tokens they sign in with.

`accounts` holds users and roles, `tokens` the token secrets and their rows.
Every function that touches the database takes an open session and leaves
committing to the caller, so a CLI command or a request is one transaction.
The CLI (`gpufleet users`, `gpufleet tokens`) and the API's sign-in both call
these; nothing here knows of HTTP.
"""
