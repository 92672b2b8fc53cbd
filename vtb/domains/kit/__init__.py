"""Sandbox-side helpers every domain kit shares (JSONL I/O, the from-pool/check/clean command line)."""
