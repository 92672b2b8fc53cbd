"""The benchmark's domains (math, tau, terminal, swe), split by who may see the code.

Each `vtb/domains/<domain>/` holds the orchestrator-side half of a task (generators, graders,
loaders, environments, user simulators: everything that knows test labels or can rebuild a
split) and one `kit/` folder, the only domain code a sandbox mounts: data tools, prompting
helpers and the shipped harnesses. `vtb/domains/kit/` holds what the kits share. The list of
sandbox-visible paths is `vtb.sandbox.runtime.SANDBOX_CODE`; `vtb.domains.registry` picks a
domain by name (orchestrator only).

This file and every `<domain>/__init__.py` import nothing at import time, so a sandbox can import a kit
without the orchestrator's modules being there.
"""
