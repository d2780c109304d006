"""Browser page slots (DESIGN.md section 5): allocation, preparation, idle closing, the slot state machine."""
