"""VibeTraining-Bench core: domains, sandboxes, research agents and train/infer engines.

Everything in this package is plain Python with no Prefect or Hydra imports, so that
steps/ (Prefect wrappers) and flows/ (wiring) stay thin and tests can call it directly.
"""

__version__ = "0.1.0"
