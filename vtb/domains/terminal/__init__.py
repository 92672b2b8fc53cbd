"""The terminal-operation domain: Terminal-Bench-style shell tasks graded by hidden pytest checks."""
