"""The model as a metered service: an OpenAI-compatible server outside the harness's sandbox (issue 17).

`server` runs in a sandbox of its own with the checkpoint; `bridge` starts a harness with the
server's Unix socket relayed to its loopback; `client` is the light client the shipped
harnesses use (any OpenAI client works too). All three are sandbox-side code.
"""
