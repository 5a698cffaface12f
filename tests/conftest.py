"""The suite's pytest plugins, from tests/support/: shared fixtures, and CI's rule on skips."""
pytest_plugins = ["support.fixtures", "support.ci_skips"]
