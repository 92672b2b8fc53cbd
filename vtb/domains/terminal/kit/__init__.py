"""The terminal domain's sandbox-side kit: the only terminal code a sandbox mounts (see vtb/domains/__init__.py)."""
