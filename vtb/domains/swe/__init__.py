"""A SWE-bench-format domain: seeded repositories with seeded bugs, patches graded by hidden tests."""
