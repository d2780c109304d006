"""Shared fixtures: real servers on their own loopback ports, never those of `make run`."""

pytest_plugins = ["tests.fixtures.servers", "tests.fixtures.demo_site", "tests.fixtures.forward_proxy",
                  "tests.fixtures.secret"]
