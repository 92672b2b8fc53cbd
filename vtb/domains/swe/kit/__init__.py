"""The swe domain's sandbox-side kit: the only swe code a sandbox mounts (see vtb/domains/__init__.py)."""
