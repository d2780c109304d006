"""Local services for `make run` and `make test`: ports, PID files, readiness checks, MongoDB choice."""
