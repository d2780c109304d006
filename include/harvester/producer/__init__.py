"""The producer: a source's input metadata -> resumable packages -> tasks in the distributor intake."""
