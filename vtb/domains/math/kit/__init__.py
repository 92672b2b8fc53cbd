"""The math domain's sandbox-side kit: the only math code a sandbox mounts (see vtb/domains/__init__.py)."""
