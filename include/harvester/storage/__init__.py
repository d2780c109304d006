"""Where records go (the MongoDB data handler, or the discard sink) and which URLs were seen."""
