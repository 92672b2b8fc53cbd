"""The tau domain's sandbox-side kit: the only tau code a sandbox mounts (see vtb/domains/__init__.py)."""
